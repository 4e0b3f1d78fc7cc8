"""Predicted against measured, term by term where a record allows, and the term that most likely holds the
difference. Tolerances are the GPU battery's acceptance bounds (docs/calibrate.md): allocated 3 %, reserved 5 %.

The measured terms add up: device used = allocated peak + allocator gap + (CUDA context + NCCL), so the
residual of each is its own share of the whole difference, and the largest share names the suspect.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.calibration.reading import Reading
from zeroplan.memory.stage import StageEstimate

ALLOCATED_TOLERANCE = 0.03  # allocated within 3 %: the GPU battery's acceptance bound, a judgement (docs/calibrate.md)
RESERVED_TOLERANCE = 0.05  # reserved, and what rests on it, within 5 %: the fragmentation margin's own size (same)


@dataclass(frozen=True, slots=True)
class Row:
    """One term: what zeroplan predicts, what the record measured (None: the record does not say)."""

    term: str
    predicted: int
    measured: int | None
    tolerance: float
    how: str  # where the prediction comes from, or how the measure is derived
    share: bool = False  # one of the additive parts (allocated, allocator gap, context + NCCL)

    @property
    def residual(self) -> int | None:
        return None if self.measured is None else self.measured - self.predicted

    def agrees(self, resolution: int) -> bool | None:
        if self.measured is None:
            return None
        return abs(self.measured - self.predicted) <= max(self.tolerance * self.measured, resolution)


@dataclass(frozen=True, slots=True)
class Comparison:
    rows: tuple[Row, ...]
    suspect: str
    reading: Reading
    stage: int
    peak_moment: str

    def row(self, term: str) -> Row | None:
        return next((r for r in self.rows if r.term == term), None)


ALLOCATED, LOADED, GAP, RESERVED, CONTEXT, DEVICE = (
    "allocated peak", "model as loaded", "allocator gap", "reserved peak", "CUDA context + NCCL", "device used")


def compare(est: StageEstimate, reading: Reading) -> Comparison:
    context, nccl, fragmentation = est.overhead_sizes
    residual = est.overheads.residual_bytes if est.overheads else 0  # a calibration's: allocated bytes, counted there
    context -= residual
    lines = est.at_peak()
    parts = ", ".join(f"{name.replace('_', ' ')} {value / 2**30:.2f}" for name, value in lines.items() if value)
    measured_gap = reading.gap_at_peak
    if measured_gap is None and reading.allocated_peak is not None and reading.reserved_peak is not None:
        measured_gap = reading.reserved_peak - reading.allocated_peak
    measured_context = reading.context
    if measured_context is None and reading.device_used is not None and reading.reserved_peak is not None:
        measured_context = reading.device_used - reading.reserved_peak
    rows = (
        Row(ALLOCATED, est.peak_bytes + residual, reading.allocated_peak, ALLOCATED_TOLERANCE,
            f"timeline peak ({est.peak_moment}): {parts} GiB" + (f" + calibrated residual {residual / 2**30:.2f}"
                                                                 if residual else ""), share=True),
        Row(LOADED, lines["parameters"], reading.loaded, ALLOCATED_TOLERANCE,
            "parameters at the peak; the record: allocated once the model is on the GPU (its load dtype)"),
        Row(GAP, fragmentation, measured_gap, RESERVED_TOLERANCE,
            "fragmentation term; measured: reserved - allocated" + (" at the allocated peak" if reading.gap_at_peak
                                                                    is not None else " peaks"), share=True),
        Row(RESERVED, est.peak_bytes + residual + fragmentation, reading.reserved_peak, RESERVED_TOLERANCE,
            "allocated peak + fragmentation"),
        Row(CONTEXT, context + nccl, measured_context, RESERVED_TOLERANCE,
            "hardware profile" + ("; measured: nvidia-smi used - reserved peak" if reading.context is None else ""),
            share=True),
        Row(DEVICE, est.total, reading.device_used, RESERVED_TOLERANCE, "the estimate's total per GPU"),
    )
    return Comparison(rows, suspect_of(rows, est, reading), reading, int(est.stage), est.peak_moment)


def suspect_of(rows: tuple[Row, ...], est: StageEstimate, reading: Reading) -> str:
    """The term that most likely holds the residual, in words."""
    off = [r for r in rows if r.agrees(reading.resolution) is False]
    if not off:
        said = [r.term for r in rows if r.measured is not None]
        return f"none: {', '.join(said)} agree within tolerance" if said else "none: the record states no measure"
    shares = [r for r in rows if r.share and r.residual is not None and r.agrees(reading.resolution) is False]
    worst = max(shares or off, key=lambda r: abs(r.residual or 0))
    sign = "more" if (worst.residual or 0) > 0 else "less"
    text = f"{worst.term}: measured {abs(worst.residual or 0) / 2**30:.2f} GiB {sign} than predicted"
    if worst.term == ALLOCATED:
        return text + "; " + _inside_allocated(rows, est, reading)
    if worst.term == GAP:
        return text + ("; the caching allocator's rounding and cached free blocks (try "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; calibrate --save records the fraction)")
    if worst.term == CONTEXT:
        return text + "; the CUDA context, cuBLAS/NCCL workspaces and other processes on the GPU (nvidia-smi counts all)"
    return text


def _inside_allocated(rows: tuple[Row, ...], est: StageEstimate, reading: Reading) -> str:
    loaded = next(r for r in rows if r.term == LOADED)
    lines = {k: v for k, v in est.at_peak().items() if v}
    largest = max(lines, key=lines.get) if lines else "parameters"
    if loaded.agrees(reading.resolution) is True:
        return (f"the model as loaded agrees, so look past the parameters: the peak's largest other line is "
                f"{max((k for k in lines if k != 'parameters'), key=lines.get, default=largest).replace('_', ' ')}")
    if loaded.agrees(reading.resolution) is False:
        return "the model as loaded differs too: the parameters' dtype or quantization first"
    return f"the peak's largest line, {largest.replace('_', ' ')} ({lines.get(largest, 0) / 2**30:.2f} GiB), first"
