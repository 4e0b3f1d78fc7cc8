"""A Calibration out of one comparison: what the record measured beyond the model, per hardware.

    allocator fraction = measured gap / measured allocated peak            (replaces --fragmentation)
    CUDA context       = measured (context + NCCL) - predicted NCCL        (replaces --cuda-context-gib)
    residual           = max(0, measured allocated - predicted allocated)  (added as a fixed term)
    allocator constant = 0: one record cannot split the gap into a fraction and a constant; edit the file, or
                         fit both from the GPU battery's cases (docs/calibrate.md)
A negative residual (zeroplan over-predicts) is reported, never saved: a calibration may only add to a plan's
margin for what the model leaves out, so a run that once measured low cannot shrink the next plan below its model.
"""

from __future__ import annotations

from zeroplan.calibration.compare import ALLOCATED, CONTEXT, GAP, Comparison
from zeroplan.calibration.file import Calibration
from zeroplan.memory.stage import StageEstimate


def fit(comparison: Comparison, est: StageEstimate, hardware: str, stack: dict[str, str]) -> Calibration:
    allocated, gap, context = (comparison.row(term) for term in (ALLOCATED, GAP, CONTEXT))
    fraction = None
    if gap.measured is not None and allocated.measured:
        fraction = max(0.0, gap.measured / allocated.measured)
    context_bytes = None
    if context.measured is not None:
        context_bytes = max(0, context.measured - est.overhead_sizes[1])
    residual = 0 if allocated.measured is None else max(0, allocated.measured - est.peak_bytes)  # from the model's own peak
    origins = tuple(comparison.reading.origin.split(", "))
    return Calibration(hardware=hardware, allocator_fraction=fraction, cuda_context_bytes=context_bytes,
                       residual_bytes=residual, stack=tuple(sorted(stack.items())), fitted_from=origins)
