"""Throughput over global batch sizes, and where ZeRO-3's overhead falls below a threshold.

Pure: imports neither rich, typer nor yaml and does no I/O. The article's claim it tests: "with a batch size
above 512 the ZeRO-3 loss stays within 11%" (the source article, 3.3; docs/advisor.md). Only tokens per
micro-step amortize ZeRO-3's per-micro-step gathers; gradient accumulation does not (docs/throughput.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from pydantic import Field

from zeroplan.errors import ZeroplanError
from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import HardwareSpec, Topology
from zeroplan.memory.setup import DeepSpeedKnobs, Parallelism, TrainingSetup, ZeroStage
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.perf.throughput import Throughput, throughput_by_stage


class SweepPoint(Frozen):
    """One global batch size: how it splits into micro-batch x accumulation, and each stage's throughput."""

    global_batch: int = Field(description="sequences per optimizer step over all GPUs")
    micro_batch: int
    grad_accum: int
    tokens_per_micro_step: int = Field(description="per GPU")
    stages: tuple[Throughput, ...] = Field(description="stages 0-3, in order")

    def overhead_pct(self, stage: ZeroStage = ZeroStage.zero3) -> float:
        return self.stages[stage].overhead_vs_zero0_pct


def split_global_batch(global_batch: int, dp: int, max_micro_batch: int | None) -> tuple[int, int]:
    """(micro-batch, accumulation): the largest micro-batch <= max_micro_batch dividing global_batch / dp.

    DeepSpeed's identity train_batch_size = micro_batch x grad_accum x dp (DeepSpeed v0.19.8 runtime/config.py).
    """
    if global_batch % dp:
        raise ZeroplanError(f"global batch ({global_batch}) is not a multiple of the data-parallel degree ({dp})")
    per_gpu = global_batch // dp
    cap = per_gpu if max_micro_batch is None else min(per_gpu, max_micro_batch)
    micro = max(m for m in range(1, cap + 1) if per_gpu % m == 0)
    return micro, per_gpu // micro


def sweep_global_batch(
    params: ParamCount,
    arch: Architecture | None,
    hw: HardwareSpec,
    setup: TrainingSetup,
    par: Parallelism,
    knobs: DeepSpeedKnobs,
    global_batches: Iterable[int],
    topology: Topology | None = None,
    mfu: float | None = None,
    *,
    max_micro_batch: int | None = None,
    comm_dtype_bytes: float | None = None,
    tuning=None,
) -> tuple[SweepPoint, ...]:
    """Throughput of every stage at each global batch; the micro-batch grows to max_micro_batch, then accumulation.

    max_micro_batch stands for the memory limit (None: no limit, accumulation stays 1); setup's own
    micro_batch and grad_accum are replaced. `tuning`: a fine-tune's FLOPs (perf/flops.py).
    """
    points = []
    for global_batch in global_batches:
        micro, accum = split_global_batch(global_batch, par.dp, max_micro_batch)
        at = replace(setup, micro_batch=micro, grad_accum=accum)
        stages = throughput_by_stage(params, arch, hw, at, par, knobs, topology, mfu, comm_dtype_bytes=comm_dtype_bytes,
                                     tuning=tuning)
        points.append(
            SweepPoint(
                global_batch=global_batch,
                micro_batch=micro,
                grad_accum=accum,
                tokens_per_micro_step=at.tokens_per_micro_step,
                stages=stages,
            )
        )
    return tuple(points)


def find_overhead_crossing(
    points: Iterable[SweepPoint], threshold_pct: float, stage: ZeroStage = ZeroStage.zero3
) -> SweepPoint | None:
    """The first point from which the stage's overhead stays at or below threshold_pct; None if it never does."""
    crossing = None
    for point in points:
        if point.overhead_pct(stage) > threshold_pct:
            crossing = None
        elif crossing is None:
            crossing = point
    return crossing
