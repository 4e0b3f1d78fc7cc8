"""Building blocks of the advisor's trees: a fit question as a Step, a plan as a Recommendation.

Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from zeroplan.advise.advice import Change, Plan, Recommendation, Step
from zeroplan.advise.candidates import NONE, Context, candidate, fits
from zeroplan.memory.engines import strategy_settings, strategy_words
from zeroplan.memory.setup import Checkpointing, Engine, ZeroStage
from zeroplan.memory.stage import StageEstimate
from zeroplan.units import Unit, format_bytes

NO_OFFLOAD = (NONE, NONE)
FIT_SOURCE = "hardware preset memory_gib; peak per zeroplan.estimate (docs/formulas.md)"


def gib(num_bytes: int) -> str:
    return format_bytes(num_bytes, Unit.gib)


def fit_step(ctx: Context, rule: str, question: str, est: StageEstimate, reason: str, source: str = FIT_SOURCE) -> Step:
    ok = fits(ctx, est)
    if ctx.policy.min_headroom_fraction:
        source += f"; {ctx.policy.min_headroom_fraction:g} kept free ({ctx.policy.source('min_headroom_fraction')})"
    return Step(rule=rule, question=question, observed=est.total, threshold=ctx.budget, unit="bytes", source=source,
                outcome="yes" if ok else "no", reason=reason if ok else short_reason(ctx, est))


def short_reason(ctx: Context, est: StageEstimate) -> str:
    if est.total > ctx.budget:
        return f"{gib(est.total - ctx.budget)} over"
    return f"host memory: {gib(est.cpu_bytes_per_node)} per node over the policy's host_memory_gib_per_node"


def words(ctx: Context, stage: ZeroStage) -> str:
    """The stage as the scenario's engine names it: 'ZeRO-3', 'FSDP FULL_SHARD (ZeRO-3 equivalent)'."""
    return strategy_words(ctx.engine, stage)


def describe(plan: Plan, engine: Engine = Engine.deepspeed) -> str:
    """'ZeRO-3, optimizer offload to cpu, full checkpointing, micro-batch 2 x accumulation 32' (the stage in the
    engine's words)."""
    parts = [strategy_words(engine, plan.stage)]
    if plan.offload_optimizer is not NONE:
        parts.append(f"optimizer offload to {plan.offload_optimizer.value}")
    if plan.offload_param is not NONE:
        parts.append(f"parameter offload to {plan.offload_param.value}")
    if plan.checkpointing is not Checkpointing.none:
        parts.append(f"{plan.checkpointing.value} activation checkpointing")
    return ", ".join(parts) + f", micro-batch {plan.micro_batch} x accumulation {plan.grad_accum}"


def recommend(ctx: Context, plan: Plan, summary: str) -> Recommendation:
    scn = candidate(ctx, plan.stage, (plan.offload_optimizer, plan.offload_param), plan.checkpointing, plan.micro_batch,
                    plan.overlap_comm)
    deepspeed = ctx.engine is Engine.deepspeed
    return Recommendation(
        fits=True, engine=ctx.engine, stage=plan.stage, strategy=words(ctx, plan.stage),
        engine_settings=strategy_settings(ctx.engine, plan.stage, scn.engine_options),
        offload_optimizer=plan.offload_optimizer, offload_param=plan.offload_param,
        checkpointing=plan.checkpointing, micro_batch=plan.micro_batch, grad_accum=plan.grad_accum,
        global_batch=ctx.global_batch, gpus=scn.parallelism.gpus, nodes=scn.parallelism.nodes,
        topology=ctx.topology, plan=plan, knobs=scn.knobs if deepspeed else None, summary=summary,
    )


def nothing(ctx: Context, summary: str, change: Change | None = None) -> Recommendation:
    par = ctx.scn.parallelism
    return Recommendation(fits=False, engine=ctx.engine, global_batch=ctx.global_batch, gpus=par.gpus, nodes=par.nodes,
                          topology=ctx.topology, change=change, summary=summary)
