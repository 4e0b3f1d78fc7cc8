"""What a record says about one GPU's memory in one run: bytes, None where the record does not say."""

from __future__ import annotations

from dataclasses import dataclass, replace

# A byte count past any GPU's memory (1 EiB): a record stating more is corrupt, refused where it is read (as are
# counts too long to convert, 4,300+ digits, and a printed inf).
MAX_RECORD_BYTES = 2**60

# The counters a record can give, in the order a comparison reads them.
MEASURES = ("allocated_peak", "reserved_peak", "gap_at_peak", "loaded", "device_used", "context")


@dataclass(frozen=True, slots=True)
class Reading:
    """One GPU's memory in one run, as a record states it (bytes).

    allocated_peak  torch.cuda.max_memory_allocated (memory_stats' allocated_bytes.all.peak)
    reserved_peak   torch.cuda.max_memory_reserved (reserved_bytes.all.peak): the caching allocator's segments
    gap_at_peak     reserved - allocated at the moment allocated peaked (a snapshot's trace only)
    loaded          allocated once the model is on the GPU, before training (the HF Trainer's init delta)
    device_used     nvidia-smi memory.used: the whole process, CUDA context and NCCL included
    context         the CUDA context alone (free memory before and after torch.cuda.init(); the GPU battery)
    resolution      the record's rounding, bytes (DeepSpeed prints GiB to 2 decimals): agreement within it is exact
    """

    kind: str
    origin: str
    allocated_peak: int | None = None
    reserved_peak: int | None = None
    gap_at_peak: int | None = None
    loaded: int | None = None
    device_used: int | None = None
    context: int | None = None
    resolution: int = 1
    segments: int | None = None  # a snapshot's cudaMalloc'd segments
    notes: tuple[str, ...] = ()

    def given(self) -> tuple[str, ...]:
        """The MEASURES this record states."""
        return tuple(name for name in MEASURES if getattr(self, name) is not None)


def merged(readings: list[Reading]) -> Reading:
    """Several records of one run as one Reading: each measure from the finest-grained record stating it (the
    first of equals); their kinds and origins joined."""
    values = {}
    for name in MEASURES + ("segments",):
        stating = [r for r in readings if getattr(r, name) is not None]
        if stating:
            values[name] = getattr(min(stating, key=lambda r: r.resolution), name)
    first = readings[0]
    return replace(first, kind=" + ".join(r.kind for r in readings), origin=", ".join(r.origin for r in readings),
                   resolution=max(r.resolution for r in readings if r.given()) if any(r.given() for r in readings) else 1,
                   notes=tuple(n for r in readings for n in r.notes), **values)
