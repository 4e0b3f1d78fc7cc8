"""One record file -> a Reading: the format recognised by its content, read with a size cap, refused in one line.

Formats (docs/calibrate.md, "Records"): torch.cuda.memory_stats() as JSON, a memory snapshot pickle, the HF Trainer's
trainer_state.json or log, DeepSpeed's see_memory_usage lines, torchtitan's step lines, Lightning's metrics.csv,
nvidia-smi's memory.used CSV.
"""

from __future__ import annotations

import json
from pathlib import Path

from zeroplan.calibration import logs, snapshot, stats, trainer
from zeroplan.calibration.reading import Reading, merged
from zeroplan.errors import SpecError
from zeroplan.readers import int_or_long, read_bytes, reject_long_integers

MAX_RECORD_BYTES = 64 * 2**20  # a text record: a training log's memory lines fit well below this
FORMATS = ("memory_stats JSON", "memory snapshot pickle", "trainer_state.json", "HF Trainer log",
           "DeepSpeed see_memory_usage log", "torchtitan log", "Lightning metrics.csv", "nvidia-smi CSV")


LOG_READERS = (logs.deepspeed_reading, logs.torchtitan_reading, trainer.trainer_log_reading)


def read_record(path: Path) -> Reading:
    origin = str(path)
    data = read_bytes(path, MAX_RECORD_BYTES if path.suffix not in (".pickle", ".pkl") else snapshot.MAX_SNAPSHOT_BYTES,
                      "dump the record with fewer entries")
    if snapshot.looks_like_pickle(data):
        return snapshot.snapshot_reading(data, origin)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{origin}: neither a snapshot pickle nor UTF-8 text (byte {exc.start})") from None
    return text_reading(text, origin)


def text_reading(text: str, origin: str) -> Reading:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _json_reading(text, origin)
    if stats.is_lightning_csv(stripped):
        return stats.lightning_reading(stripped, origin)
    if logs.is_nvidia_smi(stripped):
        return logs.nvidia_smi_reading(stripped, origin)
    found = [r for r in (reader(text, origin) for reader in LOG_READERS) if r is not None]
    if found:  # one log can hold several (the HF Trainer's metrics of a DeepSpeed run and its see_memory_usage)
        return found[0] if len(found) == 1 else merged(found)
    raise SpecError(f"{origin}: no memory record recognised; expected one of: {', '.join(FORMATS)}")


def _json_reading(text: str, origin: str) -> Reading:
    try:
        data = reject_long_integers(json.loads(text, parse_int=int_or_long), origin)
    except json.JSONDecodeError as exc:
        found = trainer.trainer_log_reading(text, origin)  # a log whose first line is a printed metrics dict
        if found is not None:
            return found
        raise SpecError(f"{origin}: line {exc.lineno}: not JSON ({exc.msg})") from None
    except RecursionError:
        raise SpecError(f"{origin}: nested too deeply for a memory record") from None
    if stats.is_memory_stats(data):
        return stats.memory_stats_reading(data, origin)
    if trainer.is_trainer_state(data):
        return trainer.trainer_state_reading(data, origin)
    raise SpecError(f"{origin}: a JSON object, but neither memory_stats() ({stats.ALLOCATED_PEAK}, "
                    f"{stats.RESERVED_PEAK}) nor a trainer_state.json (log_history)")
