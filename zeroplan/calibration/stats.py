"""torch.cuda.memory_stats() dumped as JSON, and the same counters as Lightning's DeviceStatsMonitor logs them.

memory_stats returns a flat dict of counters named `<stat>.<pool>.<metric>` (torch==2.13.0:torch/cuda/memory.py,
`memory_stats`: "allocated_bytes.{all,large_pool,small_pool}.{current,peak,allocated,freed}", "reserved_bytes...",
"num_alloc_retries", ...). The peaks are since the process started or since reset_peak_memory_stats().
Lightning's DeviceStatsMonitor logs CUDAAccelerator.get_device_stats(), which is torch.cuda.memory_stats, each key
prefixed "DeviceStatsMonitor.<hook>/" (Lightning-AI/pytorch-lightning@a33cf73:
src/lightning/pytorch/callbacks/device_stats_monitor.py, `_prefix_metric_keys`); CSVLogger writes them as columns of
metrics.csv, a row per logged step.
"""

from __future__ import annotations

import csv
import io

from zeroplan.calibration.reading import MAX_RECORD_BYTES, Reading
from zeroplan.errors import SpecError
from zeroplan.printable import brief

ALLOCATED_PEAK = "allocated_bytes.all.peak"
RESERVED_PEAK = "reserved_bytes.all.peak"
STATS_KEYS = (ALLOCATED_PEAK, RESERVED_PEAK)


def is_memory_stats(data: object) -> bool:
    return isinstance(data, dict) and any(key in data for key in STATS_KEYS)


def memory_stats_reading(data: dict, origin: str) -> Reading:
    """allocated and reserved peaks out of a memory_stats() dict; both keys required, whole byte counts."""
    allocated, reserved = (_count(data.get(key), f"{origin}: {key}") for key in STATS_KEYS)
    retries = data.get("num_alloc_retries")
    notes = (f"{retries} allocation retries (cudaMalloc failed and the cache was freed): the allocator was under "
             "pressure, reserved is not its free choice",) if isinstance(retries, int) and retries > 0 else ()
    return Reading("memory_stats", origin, allocated_peak=allocated, reserved_peak=reserved, notes=notes)


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_RECORD_BYTES:
        shown = "missing" if value is None else brief(value)
        raise SpecError(f"{where}: expected a byte count (a whole number from 0 to 2^60), got {shown}")
    return value


def is_lightning_csv(text: str) -> bool:
    header = text.split("\n", 1)[0]
    return "DeviceStatsMonitor" in header and ALLOCATED_PEAK in header


def lightning_reading(text: str, origin: str) -> Reading:
    """The largest allocated and reserved peak logged in a Lightning metrics.csv (any hook's column)."""
    rows = csv.reader(io.StringIO(text))
    header = next(rows)
    columns = {key: [i for i, name in enumerate(header) if name.endswith("/" + key) or name.endswith("." + key)]
               for key in STATS_KEYS}
    if not columns[RESERVED_PEAK]:
        raise SpecError(f"{origin}: line 1: no {RESERVED_PEAK} column (DeviceStatsMonitor logs both peaks)")
    peaks = {key: 0 for key in STATS_KEYS}
    for number, row in enumerate(rows, start=2):
        for key, indexes in columns.items():
            for i in indexes:
                if i < len(row) and row[i].strip():
                    peaks[key] = max(peaks[key], _csv_count(row[i], f"{origin}: line {number}: {header[i]}"))
    return Reading("lightning", origin, allocated_peak=peaks[ALLOCATED_PEAK], reserved_peak=peaks[RESERVED_PEAK])


def _csv_count(cell: str, where: str) -> int:
    """A CSV cell holding a byte count; CSVLogger writes floats (1234.0)."""
    try:
        value = float(cell)
    except ValueError:
        raise SpecError(f"{where}: expected a byte count, got {cell[:40]!r}") from None
    if not 0 <= value < MAX_RECORD_BYTES or value != int(value):
        raise SpecError(f"{where}: expected a byte count, got {cell[:40]!r}")
    return int(value)
