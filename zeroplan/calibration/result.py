"""One calibration run: the estimate of the configured run, the records read and merged, the comparison, the
calibration they fit; and its JSON view (the table is drawn from the same data)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zeroplan.calibration.compare import Comparison, compare
from zeroplan.calibration.file import Calibration, calibration_data
from zeroplan.calibration.fit import fit
from zeroplan.calibration.reading import MEASURES, merged
from zeroplan.calibration.records import read_record
from zeroplan.errors import UsageError
from zeroplan.memory.estimate import Estimate


@dataclass(frozen=True, slots=True)
class CalibrateResult:
    comparison: Comparison
    calibration: Calibration
    hardware: str


def calibrate(est: Estimate, records: list[Path]) -> CalibrateResult:
    """Compare `est` (one stage: the run the records come from) with the records, and fit a calibration."""
    if len(est.stages) != 1:
        raise UsageError("a record is one run: give --stage N (or a --deepspeed-config, --from file or plan that "
                         "states the stage)")
    if est.hardware is None:
        raise UsageError("calibrate needs the run's hardware: pass --hardware NAME")
    stage = est.stages[0]
    reading = merged([read_record(path) for path in records])
    comparison = compare(stage, reading)
    stack = {"engine": est.scenario.engine.value, "records": reading.kind}
    return CalibrateResult(comparison, fit(comparison, stage, est.hardware.name, stack), est.hardware.name)


def result_view(result: CalibrateResult, saved: str | None) -> dict:
    comp, reading = result.comparison, result.comparison.reading
    return {
        "hardware": result.hardware,
        "stage": comp.stage,
        "peak_moment": comp.peak_moment,
        "record": {"kind": reading.kind, "origin": reading.origin, "resolution_bytes": reading.resolution,
                   **{name: getattr(reading, name) for name in MEASURES}, "segments": reading.segments,
                   "notes": list(reading.notes)},
        "terms": [{"term": r.term, "predicted_bytes": r.predicted, "measured_bytes": r.measured,
                   "residual_bytes": r.residual, "agrees": r.agrees(reading.resolution), "tolerance": r.tolerance,
                   "how": r.how} for r in comp.rows],
        "suspect": comp.suspect,
        "calibration": calibration_data(result.calibration),
        "saved": saved,
    }
