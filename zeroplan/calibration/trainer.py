"""The Hugging Face Trainer's memory metrics (TrainingArguments(skip_memory_metrics=False)).

transformers==5.25.0:transformers/trainer_utils.py, `TrainerMemoryTracker`: at a stage's start it resets the peak
counters and notes memory_allocated (begin); at its end `alloc_delta` = end - begin and `peaked_delta` =
max_memory_allocated - end. Metrics: `init_mem_gpu_alloc_delta` (the Trainer's __init__, which moves the model to
the GPU), `train_mem_gpu_alloc_delta`, `train_mem_gpu_peaked_delta`, and `before_init_mem_gpu` (allocated before
__init__). Trainer.log appends them to trainer_state.json's log_history; `log_metrics` prints "key = <n>MB" lines
(trainer_pt_utils.py, `metrics_format`: bytes >> 20, so MiB).

The training peak, allocated: before_init + init delta + train alloc delta + train peaked delta, if nothing was
allocated between the Trainer's __init__ and train() (the usual script).
"""

from __future__ import annotations

import re

from zeroplan.calibration.reading import MAX_RECORD_BYTES, Reading
from zeroplan.errors import SpecError
from zeroplan.printable import brief

KEYS = ("before_init_mem_gpu", "init_mem_gpu_alloc_delta", "train_mem_gpu_alloc_delta", "train_mem_gpu_peaked_delta")
REQUIRED = KEYS[2:]
MIB = 2**20
_LINE = re.compile(r"['\"]?\b(" + "|".join(KEYS) + r")['\"]?\s*[:=]\s*(-?\d+)\s*(MB)?")


def is_trainer_state(data: object) -> bool:
    return isinstance(data, dict) and isinstance(data.get("log_history"), list)


def trainer_state_reading(data: dict, origin: str) -> Reading:
    """The last log_history entry carrying the train metrics."""
    entries = [e for e in data["log_history"] if isinstance(e, dict) and REQUIRED[0] in e]
    if not entries:
        raise SpecError(f"{origin}: log_history has no {REQUIRED[0]}: train with skip_memory_metrics=False")
    entry = entries[-1]
    values = {}
    for key in KEYS:
        value = entry.get(key)
        if value is None and key not in REQUIRED:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not abs(value) < MAX_RECORD_BYTES:
            raise SpecError(f"{origin}: log_history: {key}: expected a whole number of bytes, got {brief(value)}")
        values[key] = value
    return _reading("hf-trainer", origin, values, 1)


def trainer_log_reading(text: str, origin: str) -> Reading | None:
    """The metrics as a log prints them (a dict's repr, or log_metrics' "key = <n>MB"); None when absent."""
    values, resolution = {}, 1
    for match in _LINE.finditer(text):
        key, number, mb = match.groups()
        if len(number.lstrip("-")) > len(str(MAX_RECORD_BYTES)):  # past any GPU, and int() refuses 4,300+ digits
            raise SpecError(f"{origin}: {key}: {brief(number)}: a byte count past any GPU")
        values[key] = int(number) * (MIB if mb else 1)  # the last value of each key: the last train() call
        resolution = max(resolution, MIB // 2 if mb else 1)
    if not any(key in values for key in REQUIRED):
        return None
    missing = [key for key in REQUIRED if key not in values]
    if missing:
        raise SpecError(f"{origin}: has {', '.join(k for k in REQUIRED if k in values)} but no {missing[0]}")
    return _reading("hf-trainer", origin, values, resolution)


def _reading(kind: str, origin: str, values: dict[str, int], resolution: int) -> Reading:
    before = values.get("before_init_mem_gpu")
    loaded = (before or 0) + values.get("init_mem_gpu_alloc_delta", 0)
    peak = loaded + values["train_mem_gpu_alloc_delta"] + values["train_mem_gpu_peaked_delta"]
    if peak < 0:
        raise SpecError(f"{origin}: the memory metrics sum to a negative peak ({peak} B)")
    if peak >= MAX_RECORD_BYTES:
        raise SpecError(f"{origin}: the memory metrics sum to {peak:,} B, past any GPU")
    notes = ["allocated peak = before_init + init delta + train alloc delta + train peaked delta (transformers' "
             "TrainerMemoryTracker)"]
    if before is None:
        notes.append("no before_init_mem_gpu: memory allocated before the Trainer was built is taken as 0")
    has_init = "init_mem_gpu_alloc_delta" in values
    return Reading(kind, origin, allocated_peak=peak, loaded=loaded if has_init else None, resolution=resolution,
                   notes=tuple(notes))
