"""zeroplan's default decision tree: the article's, extended and corrected (docs/advisor.md).

Stages in increasing order of communication (0, 1, 2, 3) at micro-batch 1; when none fits, activation
checkpointing (selective, then full); then offload (optimizer to CPU, parameters to CPU, both to NVMe); then
the fewest GPUs that would fit, as the smallest change. A configuration found: ZeRO-1/2 get overlap_comm when
its second reduce bucket fits, the micro-batch grows to the largest that fits and divides the sequences per
GPU, and ZeRO-3 gets a step with its predicted overhead.
Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from zeroplan.advise.advice import Change, Plan, Recommendation, Step
from zeroplan.advise.candidates import (
    RUNGS,
    Context,
    candidate,
    fit_at,
    fits,
    largest_micro_batch,
    make_plan,
    overlap_choice,
)
from zeroplan.advise.steps import (
    NO_OFFLOAD,
    describe,
    fit_step,
    nothing,
    recommend,
    short_reason,
    words,
)
from zeroplan.hardware.spec import Topology
from zeroplan.memory.capacity import min_gpus
from zeroplan.memory.setup import Checkpointing, Engine, ZeroStage
from zeroplan.memory.stage import StageEstimate

STAGE_REASONS = {
    ZeroStage.zero0: "the model fits replicated: no sharding, the least communication",
    ZeroStage.zero1: "the lowest stage that fits; ZeRO-1 communicates as much as ZeRO-0 (2 Psi per step)",
    ZeroStage.zero2: "the lowest stage that fits; ZeRO-2 adds a reduce-scatter per micro-step",
    ZeroStage.zero3: "the lowest stage that fits; ZeRO-3 gathers the parameters twice per micro-step (3 Psi)",
}
RUNG_RULES = {
    RUNGS[1]: ("offload.optimizer-cpu", "the optimizer states offloaded to CPU"),
    RUNGS[2]: ("offload.param-cpu", "the optimizer states and parameters offloaded to CPU"),
    RUNGS[3]: ("offload.nvme", "the optimizer states and parameters offloaded to NVMe"),
}


def _stages(ctx: Context) -> tuple[ZeroStage, ...]:
    """The engine's stages, lowest first (ZeRO-1 or its equivalent only with consider_zero1)."""
    return tuple(s for s in ctx.stages if s is not ZeroStage.zero1 or ctx.policy.consider_zero1)


def _stage_reason(ctx: Context, stage: ZeroStage) -> str:
    if ctx.engine is Engine.deepspeed:
        return STAGE_REASONS[stage]
    if stage is _stages(ctx)[0]:
        return "the engine's least sharding fits: the least communication"
    return "the lowest stage that fits: more sharding only where less does not fit"


Found = tuple[ZeroStage | None, Checkpointing | None, StageEstimate]  # (None, None, smallest peak) if nothing fits


def _first_fit(ctx: Context, rung, levels) -> Found:
    """Least checkpointing first, then the lowest stage: the first that fits; else the smallest peak seen."""
    smallest = None
    for ckpt in levels:
        for stage in [s for s in ctx.rung_stages(rung) if s in _stages(ctx)]:
            est = fit_at(ctx, stage, rung, ckpt)
            if fits(ctx, est):
                return stage, ckpt, est
            smallest = est if smallest is None or est.total < smallest.total else smallest
    return None, None, smallest


def _tier_step(ctx: Context, rule: str, question: str, source: str, found: Found, why: str) -> Step:
    """A 'does any stage fit with ...?' step; `why` follows the stage and checkpointing when one does."""
    stage, ckpt, est = found
    if stage is None:
        return Step(rule=rule, question=question, observed=est.total, threshold=ctx.budget, unit="bytes",
                    source=source, outcome="no", reason=f"the smallest peak, {words(ctx, est.stage)}'s, is "
                    + short_reason(ctx, est))
    how = "no" if ckpt is Checkpointing.none else ckpt.value
    return Step(rule=rule, question=question, observed=est.total, threshold=ctx.budget, unit="bytes", source=source,
                outcome="yes", reason=f"{words(ctx, stage)} fits ({how} checkpointing): {why}")


def _search(ctx: Context, steps: list[Step]) -> tuple[ZeroStage, tuple, Checkpointing] | None:
    """Stages, then checkpointing, then offload: the first configuration that fits, one step per question."""
    given = ctx.scn.setup.checkpointing
    for stage in _stages(ctx):
        est = fit_at(ctx, stage, NO_OFFLOAD, given)
        suffix = "" if given is Checkpointing.none else f" with {given.value} checkpointing"
        steps.append(fit_step(ctx, f"fit.zero{int(stage)}", f"Does {words(ctx, stage)} fit at micro-batch 1{suffix}?",
                               est, _stage_reason(ctx, stage)))
        if fits(ctx, est):
            return stage, NO_OFFLOAD, given
    source = ctx.policy.source("consider_checkpointing")
    if ctx.policy.consider_checkpointing and given is not Checkpointing.full and not ctx.activations_modelled:
        steps.append(Step(rule="ckpt.unmodelled", question="Would activation checkpointing make a stage fit?",
                          observed="activations not modelled (bare parameter count)", source=source,
                          outcome="skipped", reason="checkpointing cannot change a fit without activations"))
    for level in ctx.levels[1:]:
        found = _first_fit(ctx, NO_OFFLOAD, (level,))
        steps.append(_tier_step(ctx, f"ckpt.{level.value}", f"Does a stage fit with {level.value} activation "
                                "checkpointing?", source, found, "recomputation only because nothing fits without it"))
        if found[0] is not None:
            return found[0], NO_OFFLOAD, level
    if not ctx.policy.consider_offload:
        return None
    if len(ctx.rungs) == 1:
        steps.append(Step(rule="offload.unmodelled", question="Would offload make a stage fit?",
                          observed=f"--engine {ctx.engine.value}", source="docs/engines.md: FSDP CPU offload is "
                          "estimated, not searched", outcome="skipped",
                          reason="the advisor searches DeepSpeed's offload only: not offered (FSDP CPU offload is "
                                 "estimated with --offload-optimizer cpu --offload-param cpu)"))
        return None
    for rung in [r for r in (RUNGS[1:] if ctx.policy.consider_nvme else RUNGS[1:3]) if r in ctx.rungs]:
        rule, what = RUNG_RULES[rung]
        found = _first_fit(ctx, rung, ctx.levels)
        source = ctx.policy.source("consider_nvme" if rung[0].value == "nvme" else "consider_offload")
        steps.append(_tier_step(ctx, rule, f"Does a stage fit with {what}?", source, found,
                                "offload, the last resort, because nothing fits on the GPUs alone"))
        if found[0] is not None:
            return found[0], rung, found[1]
    return None


def _overlap_step(ctx: Context, stage: ZeroStage, est: StageEstimate) -> Step:
    ok = fits(ctx, est)
    return Step(rule="overlap.comm", question=f"Does ZeRO-{int(stage)} still fit with overlap_comm on?",
                observed=est.total, threshold=ctx.budget, unit="bytes",
                source="deepspeedai/DeepSpeed@edaa7221:deepspeed/runtime/zero/stage_1_and_2.py: overlap_comm "
                "doubles the reduce bucket in stages 1-2; docs/throughput.md: without it the gradient reduction is "
                "exposed",
                outcome="yes" if ok else "no",
                reason="overlap_comm on: the gradient reduction hides under the backward" if ok else
                f"overlap_comm off, DeepSpeed's default: its second reduce bucket is {short_reason(ctx, est)}")


def _batch_step(ctx: Context, stage: ZeroStage, rung, ckpt: Checkpointing, overlap: bool) -> tuple[Step, int]:
    fitting, chosen = largest_micro_batch(ctx, stage, rung, ckpt, overlap)
    memory = (f"{fitting} fit in memory" if ctx.activations_modelled
              else "activations not modelled, so memory does not limit it")
    why = ("ZeRO-3 re-gathers parameters every micro-step: sequences per micro-step amortize that, accumulation "
           "does not" if stage is ZeroStage.zero3 else "more tokens per micro-step amortize each collective")
    step = Step(rule="batch.micro", question=f"Largest micro-batch that fits at {words(ctx, stage)} and divides "
                f"{ctx.per_gpu} sequences per GPU?", observed=chosen, threshold=ctx.per_gpu, unit="sequences",
                source="global batch / GPUs; DeepSpeed: train_batch_size = micro_batch x grad_accum x dp",
                outcome=f"micro-batch {chosen} x accumulation {ctx.per_gpu // chosen}",
                reason=f"{memory}; {why}")
    return step, chosen


def _overhead_step(ctx: Context, plan: Plan) -> Step:
    limit, pct = ctx.policy.max_zero3_overhead_pct, plan.overhead_vs_zero0_pct
    where = {Topology.pcie: "over PCIe every micro-step's gathers cross the bus",
             Topology.multinode: "across nodes the gathers cross the NICs",
             Topology.nvlink: "on NVLink"}[ctx.topology]
    tokens = plan.micro_batch * ctx.scn.setup.seq_len
    return Step(rule="zero3.overhead",
                question=f"Predicted {words(ctx, ZeroStage.zero3)} step-time overhead over ZeRO-0 on "
                f"{ctx.topology.value}?",
                observed=round(pct, 2), threshold=limit, unit="percent",
                source=ctx.policy.source("max_zero3_overhead_pct"),
                outcome="ok" if pct <= limit else "warn",
                reason=f"{where}, at {tokens} tokens per micro-step" + ("" if pct <= limit else
                       "; more tokens per micro-step, ZeRO++ or a lower stage with offload cut it"))


def _engine_hint(ctx: Context) -> str:
    """Why a PyTorch engine may fit on no GPU count, and what to change."""
    if ctx.engine is Engine.ddp:
        return "; DDP keeps whole parameters and gradients on every GPU: --engine fsdp or fsdp2 shards them"
    if ctx.engine is not Engine.deepspeed and ctx.scn.layout is None and not ctx.scn.model.largest_layer_params:
        return ("; with a bare parameter count the wrapping is unknown and FSDP gathers the whole model as one unit: "
                "give --model or --largest-layer")
    return ""


def _fewest_gpus(ctx: Context) -> tuple[Step, Change]:
    """The smallest change: the fewest GPUs (whole nodes past one) on which a stage fits without offload."""
    given, best = ctx.scn.parallelism, None
    question = "Fewest GPUs on which a stage fits without offload?"
    if ctx.engine is Engine.none:  # one GPU by definition: more GPUs need a data-parallel engine
        reason = ("--engine none is one GPU without a wrapper: more GPUs need --engine ddp, fsdp, fsdp2 or deepspeed; "
                  "on one GPU, shorten the sequence or use a larger GPU")
        return (Step(rule="gpus.min", question=question, observed=None, threshold=given.gpus, unit="gpus",
                     source="docs/engines.md: --engine none", outcome="none", reason=reason),
                Change(kind="none", description=reason))
    for ckpt in ctx.levels:
        for stage in _stages(ctx):
            par = min_gpus(candidate(ctx, stage, NO_OFFLOAD, ckpt), stage, limit=ctx.policy.max_gpus,
                           free_fraction=ctx.policy.min_headroom_fraction)
            if par is not None and (best is None or par.gpus < best[1].gpus):
                best = (stage, par, ckpt)
        if best:
            break
    if best is None:
        reason = (f"no stage fits on up to {ctx.policy.max_gpus} GPUs: what each GPU holds whatever their number "
                  "(activations, buffers, overhead) is too much; shorten the sequence or use a larger GPU"
                  + _engine_hint(ctx))
        return (Step(rule="gpus.min", question=question, observed=None, threshold=given.gpus, unit="gpus",
                     source=ctx.policy.source("max_gpus"), outcome="none", reason=reason),
                Change(kind="none", description=reason))
    stage, par, ckpt = best
    how = "" if ckpt is Checkpointing.none else f" with {ckpt.value} checkpointing"
    nodes = "1 node" if par.nodes == 1 else f"{par.nodes} nodes"
    description = f"{words(ctx, stage)}{how} fits on {par.gpus} GPUs ({nodes})"
    return (Step(rule="gpus.min", question=question, observed=par.gpus, threshold=given.gpus, unit="gpus",
                 source="zeroplan.memory.capacity.min_gpus (whole nodes past one)", outcome="change",
                 reason=f"{description}: the smallest change"),
            Change(kind="gpus", description=description, stage=stage, gpus=par.gpus, nodes=par.nodes,
                   checkpointing=ckpt))


def default_tree(ctx: Context) -> tuple[list[Step], Recommendation]:
    steps: list[Step] = []
    found = _search(ctx, steps)
    if found is None:
        step, change = _fewest_gpus(ctx)
        steps.append(step)
        return steps, nothing(ctx, f"nothing fits on {ctx.scn.parallelism.gpus} GPUs", change)
    stage, rung, ckpt = found
    overlap, est = overlap_choice(ctx, stage, rung, ckpt)
    if est is not None:
        steps.append(_overlap_step(ctx, stage, est))
    step, micro = _batch_step(ctx, stage, rung, ckpt, overlap)
    steps.append(step)
    plan = make_plan(ctx, stage, rung, ckpt, micro, overlap)
    if stage is ZeroStage.zero3:
        steps.append(_overhead_step(ctx, plan))
    return steps, recommend(ctx, plan, describe(plan, ctx.engine))
