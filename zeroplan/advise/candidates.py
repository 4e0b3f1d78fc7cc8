"""The configurations the advisor weighs: stage x offload x checkpointing, each fitted and timed.

Fit is `estimate.evaluate` against the usable memory less the policy's free share (and, for offload, the
host memory per node when the policy knows it); speed is `perf.estimate_throughput`. The advisor's trees
(advise/advisor.py) ask their questions through these functions, so a recommendation and its row in the
alternatives table come from the same numbers. Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zeroplan.advise.advice import Plan
from zeroplan.advise.policy import AdvisorPolicy, Tree
from zeroplan.hardware.spec import HardwareSpec, Topology
from zeroplan.memory.capacity import budget_bytes, max_micro_batch
from zeroplan.memory.engines import models_offload, supported_stages
from zeroplan.memory.estimate import Scenario, evaluate, stage_knobs
from zeroplan.memory.summary import param_count
from zeroplan.memory.setup import Checkpointing, Engine, OffloadDevice, ZeroStage
from zeroplan.memory.stage import StageEstimate
from zeroplan.perf.throughput import Throughput, estimate_throughput
from zeroplan.units import GIB

NONE, CPU, NVME = OffloadDevice.none, OffloadDevice.cpu, OffloadDevice.nvme
# Offload rungs, cheapest first: (optimizer, parameters). Optimizer offload to CPU works from stage 1, parameter
# offload and NVMe only at stage 3 (DeepSpeed v0.19.8 runtime/zero/offload_config.py). On the GPU, NVMe frees what
# CPU offload frees; it differs in host memory, so it is the rung for when the host cannot hold the states.
RUNGS: tuple[tuple[OffloadDevice, OffloadDevice], ...] = ((NONE, NONE), (CPU, NONE), (CPU, CPU), (NVME, NVME))
# FSDP/FSDP2 offload all or nothing: CPUOffload(offload_params=True) / CPUOffloadPolicy() (torch==2.13.0:
# torch/distributed/fsdp/api.py, torch/distributed/fsdp/_fully_shard/_fsdp_api.py), searched at stage 3 (FULL_SHARD).
FSDP_RUNGS: tuple[tuple[OffloadDevice, OffloadDevice], ...] = (RUNGS[0], RUNGS[2])
CHECKPOINTING_ORDER = (Checkpointing.none, Checkpointing.selective, Checkpointing.full)  # least memory saved first
# selective-op (torchtitan's per-op policy) is tried only when given: it is modelled for Llama-like families only
RECOMPUTE_RANK = {Checkpointing.none: 0, Checkpointing.selective: 1, Checkpointing.selective_op: 2, Checkpointing.full: 3}


def rung_stages(rung: tuple[OffloadDevice, OffloadDevice]) -> tuple[ZeroStage, ...]:
    """Stages a rung applies to: all without offload, 1-3 with CPU optimizer offload, else 3."""
    if rung == (NONE, NONE):
        return tuple(ZeroStage)
    if rung == (CPU, NONE):
        return ZeroStage.zero1, ZeroStage.zero2, ZeroStage.zero3
    return (ZeroStage.zero3,)


@dataclass(frozen=True)
class Context:
    """One advise call: the planned scenario (micro-batch 1), the policy, the topology, the global batch."""

    scn: Scenario
    policy: AdvisorPolicy
    topology: Topology
    global_batch: int
    mfu: float | None = None

    @property
    def hw(self) -> HardwareSpec:
        return self.scn.hardware

    @property
    def engine(self) -> Engine:
        return self.scn.engine

    @property
    def stages(self) -> tuple[ZeroStage, ...]:
        """The stages the engine runs (zeroplan.engines.supported_stages) that the fine-tune's base allows (QLoRA's
        quant_storage at ZeRO-3): the only ones asked about. The advisor never changes what the run trains."""
        from zeroplan.memory.estimate import refused_stages

        return refused_stages(self.scn, supported_stages(self.engine))[0]

    @property
    def rungs(self) -> tuple[tuple[OffloadDevice, OffloadDevice], ...]:
        """Offload rungs to try: all for DeepSpeed; FSDP2's CPU offload (parameters, gradients and optimizer states
        together, at reshard_after_forward=True: memory.engines.engine_offload); none but no offload for the rest."""
        if models_offload(self.engine):
            return RUNGS
        return FSDP_RUNGS if self.engine is Engine.fsdp2 else RUNGS[:1]  # FSDP1's: see docs/advisor.md

    def rung_stages(self, rung) -> tuple[ZeroStage, ...]:
        """The stages a rung applies to that this engine runs."""
        return tuple(s for s in rung_stages(rung) if s in self.stages)

    @property
    def per_gpu(self) -> int:
        """Sequences per GPU per optimizer step: micro-batch x accumulation."""
        return self.global_batch // self.scn.parallelism.dp

    @property
    def budget(self) -> int:
        return budget_bytes(self.scn.usable_bytes, self.policy.min_headroom_fraction)

    @property
    def activations_modelled(self) -> bool:
        return self.scn.arch is not None

    @property
    def levels(self) -> tuple[Checkpointing, ...]:
        """Checkpointing levels to try: the given one, then heavier ones when the default tree may add them."""
        given = self.scn.setup.checkpointing
        if self.policy.tree is Tree.article or not self.policy.consider_checkpointing or not self.activations_modelled:
            return (given,)
        return (given,) + tuple(c for c in CHECKPOINTING_ORDER if RECOMPUTE_RANK[c] > RECOMPUTE_RANK[given])


def candidate(ctx: Context, stage: ZeroStage, rung: tuple[OffloadDevice, OffloadDevice], ckpt: Checkpointing,
              micro_batch: int = 1, overlap: bool | None = None) -> Scenario:
    """The planned scenario with this offload, checkpointing and micro-batch (accumulation fills the global batch).

    overlap: overlap_comm; None = the scenario's, else DeepSpeed's default for the stage (on for stage 3 only).
    """
    scn = ctx.scn
    overlap = scn.knobs.overlap_comm_for(stage) if overlap is None else overlap
    update = {"offload_optimizer": rung[0], "offload_param": rung[1], "overlap_comm": overlap}
    knobs = stage_knobs(replace(scn.knobs, **update), stage)
    setup = replace(scn.setup, checkpointing=ckpt, micro_batch=micro_batch, grad_accum=max(1, ctx.per_gpu // micro_batch))
    return replace(scn, knobs=knobs, setup=setup)


def host_fits(ctx: Context, est: StageEstimate) -> bool:
    """Offloaded states fit the host memory per node, when the policy knows it."""
    host = ctx.policy.host_memory_gib_per_node
    return host is None or est.cpu_bytes_per_node <= host * GIB


def fits(ctx: Context, est: StageEstimate) -> bool:
    return est.total <= ctx.budget and host_fits(ctx, est)


def fit_at(ctx: Context, stage: ZeroStage, rung, ckpt: Checkpointing) -> StageEstimate:
    """Peak memory at micro-batch 1."""
    return evaluate(candidate(ctx, stage, rung, ckpt), stage)


def lightest_fit(ctx: Context, stage: ZeroStage, rung) -> tuple[Checkpointing | None, StageEstimate]:
    """The least checkpointing (of ctx.levels) at which the stage fits at micro-batch 1, with its estimate;
    (None, the heaviest level's estimate) if none does."""
    est = None
    for ckpt in ctx.levels:
        est = fit_at(ctx, stage, rung, ckpt)
        if fits(ctx, est):
            return ckpt, est
    return None, est


def overlap_choice(ctx: Context, stage: ZeroStage, rung, ckpt: Checkpointing) -> tuple[bool, StageEstimate | None]:
    """overlap_comm as planned, and the estimate that decided it (None when nothing was weighed).

    Given in the scenario: kept. Stages 0 and 3: DeepSpeed's default (off, on). Stages 1-2: on when its second
    reduce bucket (DeepSpeed v0.19.8 runtime/zero/stage_1_and_2.py) still fits at micro-batch 1, since without it
    the gradient reduction is exposed (docs/throughput.md); else off, DeepSpeed's default.
    """
    if (ctx.scn.knobs.overlap_comm is not None or stage in (ZeroStage.zero0, ZeroStage.zero3)
            or ctx.engine is not Engine.deepspeed):  # overlap_comm is DeepSpeed's; PyTorch engines always overlap
        return ctx.scn.knobs.overlap_comm_for(stage), None
    est = evaluate(candidate(ctx, stage, rung, ckpt, overlap=True), stage)
    return fits(ctx, est), est


def largest_micro_batch(ctx: Context, stage: ZeroStage, rung, ckpt: Checkpointing,
                        overlap: bool | None = None) -> tuple[int, int]:
    """(largest micro-batch that fits, up to the sequences per GPU; the largest divisor of them up to it).

    The divisor keeps DeepSpeed's identity train_batch_size = micro_batch x grad_accum x dp exact.
    """
    fitting = max_micro_batch(candidate(ctx, stage, rung, ckpt, overlap=overlap), stage, limit=ctx.per_gpu,
                              free_fraction=ctx.policy.min_headroom_fraction)
    chosen = max(d for d in range(1, max(fitting, 1) + 1) if ctx.per_gpu % d == 0)
    return fitting, chosen


def throughput(ctx: Context, scn: Scenario, stage: ZeroStage) -> Throughput:
    return estimate_throughput(param_count(scn.model), scn.arch, ctx.hw, scn.setup, scn.parallelism, stage,
                               scn.knobs, ctx.topology, ctx.mfu, tuning=scn.tuning,  # a fine-tune's FLOPs
                               engine=scn.engine)


def make_plan(ctx: Context, stage: ZeroStage, rung, ckpt: Checkpointing, micro_batch: int,
              overlap: bool | None = None) -> Plan:
    """Memory and speed of one configuration at its micro-batch."""
    scn = candidate(ctx, stage, rung, ckpt, micro_batch, overlap)
    est, speed = evaluate(scn, stage), throughput(ctx, scn, stage)
    return Plan(
        stage=stage, offload_optimizer=scn.knobs.offload_optimizer, offload_param=scn.knobs.offload_param,
        checkpointing=ckpt, overlap_comm=scn.knobs.overlap_comm, micro_batch=micro_batch,
        grad_accum=scn.setup.grad_accum, peak_bytes=est.total,
        usable_bytes=est.usable_bytes, headroom_bytes=est.headroom_bytes, cpu_bytes_per_node=est.cpu_bytes_per_node,
        nvme_bytes_per_node=est.nvme_bytes_per_node, step_time_s=speed.step_time_s,
        tokens_per_s_per_gpu=speed.tokens_per_s_per_gpu, mfu=speed.mfu,
        overhead_vs_zero0_pct=speed.overhead_vs_zero0_pct,
    )


def preference(plan: Plan) -> tuple[int, int, int]:
    """The default tree's order: less offload, then less checkpointing, then less communication (lower stage)."""
    rung = RUNGS.index((plan.offload_optimizer, plan.offload_param))
    return rung, RECOMPUTE_RANK[plan.checkpointing], int(plan.stage)


def alternatives(ctx: Context, chosen: Plan | None) -> tuple[Plan, ...]:
    """Every stage x offload the engine runs that fits (at its least checkpointing, overlap_comm as overlap_choice
    says, and its largest micro-batch), `chosen` first, then in the default tree's order of preference."""
    plans = []
    for rung in ctx.rungs:
        for stage in ctx.rung_stages(rung):
            ckpt, _ = lightest_fit(ctx, stage, rung)
            if ckpt is not None:
                overlap, _ = overlap_choice(ctx, stage, rung, ckpt)
                micro = largest_micro_batch(ctx, stage, rung, ckpt, overlap)[1]
                plans.append(make_plan(ctx, stage, rung, ckpt, micro, overlap))
    plans.sort(key=preference)
    if chosen is None:
        return tuple(plans)
    return (chosen, *[p for p in plans if p.key != chosen.key])
