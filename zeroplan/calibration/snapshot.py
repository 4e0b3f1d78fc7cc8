"""torch.cuda.memory._dump_snapshot() pickles, read without running them.

The pickle holds torch.cuda.memory._snapshot()'s dict (torch==2.13.0:torch/cuda/memory.py, `_snapshot` docstring:
Snapshot = {segments: [Segment], device_traces: [[TraceEntry]]}; a Segment has device, total_size (cudaMalloc'd),
allocated_size, blocks; a TraceEntry has action (alloc, free_requested, free_completed, segment_alloc, segment_free,
oom, snapshot), addr, size). `_dump_snapshot` writes it with pickle.dump: dicts, lists, tuples, strings and numbers
only. RestrictedUnpickler builds exactly those and refuses every global (a class or function a hostile pickle would
call), persistent id and out-of-band buffer, so reading one runs no code from it.

Reserved is the sum of segments' total_size. The trace (only with torch.cuda.memory._record_memory_history) is
replayed backwards from the snapshot's state to find the allocated peak, and the reserved bytes at that moment.
"""

from __future__ import annotations

import io
import pickle

from zeroplan.calibration.reading import MAX_RECORD_BYTES, Reading
from zeroplan.errors import SpecError
from zeroplan.printable import brief

MAX_SNAPSHOT_BYTES = 256 * 2**20  # a snapshot with a long trace runs to GBs; record with a smaller max_entries
PICKLE_PROTOCOL_0 = (b"(", b"}", b"]")  # protocol 0/1 start with MARK, EMPTY_DICT or EMPTY_LIST
# alloc and free_completed move allocated bytes; segment_alloc and segment_free move reserved bytes.
ALLOCATED_DELTA = {"alloc": 1, "free_completed": -1}
RESERVED_DELTA = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


class RestrictedUnpickler(pickle.Unpickler):
    """pickle.Unpickler that builds only the plain containers and scalars: any global is refused."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refuses the global {module[:60]}.{name[:60]} (a snapshot holds plain data)")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refuses a persistent id (a snapshot holds plain data)")


def looks_like_pickle(data: bytes) -> bool:
    return data[:1] == b"\x80" or data[:1] in PICKLE_PROTOCOL_0


def load_snapshot(data: bytes, origin: str) -> dict:
    try:
        loaded = RestrictedUnpickler(io.BytesIO(data)).load()
    except RecursionError:
        raise SpecError(f"{origin}: nested too deeply for a memory snapshot") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            OverflowError, MemoryError, UnicodeDecodeError) as exc:
        raise SpecError(f"{origin}: not a memory snapshot pickle ({str(exc)[:160] or type(exc).__name__})") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("segments"), list):
        raise SpecError(f"{origin}: expected torch.cuda.memory._snapshot()'s dict with a 'segments' list")
    return loaded


def snapshot_reading(data: bytes, origin: str) -> Reading:
    snap = load_snapshot(data, origin)
    segments = [_segment(s, f"{origin}: segments[{i}]") for i, s in enumerate(snap["segments"])]
    devices = sorted({device for device, _, _ in segments})
    device = devices[0] if devices else 0
    notes = [f"{len(devices)} devices in the snapshot: device {device} read"] if len(devices) > 1 else []
    reserved = sum(total for d, total, _ in segments if d == device)
    allocated = sum(used for d, _, used in segments if d == device)
    trace = _trace(snap.get("device_traces"), device, origin)
    if not trace:
        notes.append("no allocation trace (record with torch.cuda.memory._record_memory_history): reserved is the "
                     "segments cached at the dump, the allocated peak is unknown")
        return Reading("snapshot", origin, reserved_peak=reserved, segments=len(segments), notes=tuple(notes))
    peak, reserved_peak, gap = replay(trace, allocated, reserved)
    notes.append(f"{len(trace)} trace entries replayed from the dump backwards; a ring buffer that dropped earlier "
                 "entries hides a peak before them")
    return Reading("snapshot", origin, allocated_peak=peak, reserved_peak=reserved_peak, gap_at_peak=gap,
                   segments=len(segments), notes=tuple(notes))


def replay(trace: list[tuple[str, int]], allocated_end: int, reserved_end: int) -> tuple[int, int, int]:
    """(allocated peak, reserved peak, reserved - allocated at the allocated peak), walking the trace from the
    snapshot's state (its end) back to its start."""
    allocated, reserved = allocated_end, reserved_end
    peak, reserved_peak, gap = allocated, reserved, reserved - allocated
    for action, size in reversed(trace):
        allocated -= ALLOCATED_DELTA.get(action, 0) * size
        reserved -= RESERVED_DELTA.get(action, 0) * size
        reserved_peak = max(reserved_peak, reserved)
        if allocated > peak:
            peak, gap = allocated, reserved - allocated
    return peak, reserved_peak, gap


def _segment(segment: object, where: str) -> tuple[int, int, int]:
    if not isinstance(segment, dict):
        raise SpecError(f"{where}: expected a segment dict")
    total, used = (_bytes(segment.get(key), f"{where}.{key}") for key in ("total_size", "allocated_size"))
    device = segment.get("device", 0)
    return (device if isinstance(device, int) else 0), total, used


def _trace(traces: object, device: int, origin: str) -> list[tuple[str, int]]:
    if traces is None:
        return []
    if not isinstance(traces, list) or (traces and not isinstance(traces[0], list)):
        raise SpecError(f"{origin}: device_traces: expected a list of lists (one per device)")
    if device >= len(traces):
        return []
    out = []
    for i, entry in enumerate(traces[device]):
        where = f"{origin}: device_traces[{device}][{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("action"), str):
            raise SpecError(f"{where}: expected a trace entry with an action")
        if entry["action"] in ALLOCATED_DELTA or entry["action"] in RESERVED_DELTA:
            out.append((entry["action"], _bytes(entry.get("size"), f"{where}.size")))
    return out


def _bytes(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_RECORD_BYTES:
        raise SpecError(f"{where}: expected a byte count, got {brief(value)}")
    return value
