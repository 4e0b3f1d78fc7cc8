"""The parallelism search: every layout x ZeRO stage x checkpointing x micro-batch that fits, ranked by predicted
step time, with a trace of the choice (docs/advisor.md, "Parallelism search").

For each mesh (space.enumerate_layouts) and each stage its stack runs, the heaviest checkpointing is asked first at
micro-batch 1: if it does not fit, no lighter level does (recompute only frees memory), and they are skipped. Then
the levels lightest first: the largest fitting micro-batch by bisection (fit.Fitter.largest); once a level fits
the whole per-rank batch in one micro-batch, heavier levels are skipped (they run the same micro-batches with more
recompute). Fitting configurations are timed (speed.step) at their largest micro-batch, and with pp > 1 at every
smaller fitting one too, since more micro-batches shrink the pipeline bubble. All of that is under 1F1B. Then each
timed pipelined configuration whose step less its whole bubble still beats the fastest found (interleaving can save
at most the bubble, and at the same micro-batch it keeps at least 1F1B's activations in flight) is weighed again
under interleaved 1F1B with its virtual-stage counts (space.virtual_stages) and re-ranked with the rest (the trace's
search.schedule says why a schedule won). The fastest wins; ties go
to less model parallelism, a lower stage, less recompute, fewer virtual stages. It never changes the model,
sequence length, precision or the global batch (micro-batch x accumulation x dp = global batch). Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from zeroplan.advise.advisor import planned_scenario
from zeroplan.advise.candidates import RECOMPUTE_RANK
from zeroplan.advise.layouts import speed
from zeroplan.advise.layouts.fit import Fitter
from zeroplan.advise.layouts.result import LayoutAdvice, LayoutPlan, SearchCounts
from zeroplan.advise.layouts.space import (
    MESH_CHECKPOINTING,
    Layout,
    Stack,
    enumerate_layouts,
    virtual_stages,
)
from zeroplan.advise.layouts.trace import search_trace
from zeroplan.advise.policy import DEFAULT, AdvisorPolicy
from zeroplan.errors import ZeroplanError
from zeroplan.hardware.spec import Topology
from zeroplan.memory.activations.pipeline import rounds_divide
from zeroplan.memory.capacity import budget_bytes
from zeroplan.memory.estimate import Scenario
from zeroplan.memory.setup import Checkpointing, Engine, ZeroStage
from zeroplan.memory.stage import StageEstimate
from zeroplan.perf.collectives import check_topology, default_topology

TOP = 10  # alternatives kept, one per mesh


@dataclass(frozen=True, slots=True)
class Miss:
    """A layout x stage that fits at no micro-batch, with its smallest peak (micro-batch 1, the most recompute)."""

    layout: Layout
    stage: ZeroStage
    checkpointing: Checkpointing
    peak_bytes: int
    states_bytes: int = 0  # the busiest rank's parameters, gradients and optimizer states
    activation_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Timed:
    """A fitting configuration and its predicted step; its peak is computed when it is shown (None until then)."""

    layout: Layout
    stage: ZeroStage
    checkpointing: Checkpointing
    micro_batch: int
    step: object  # perf.mesh.MeshStep
    peak: StageEstimate | None

    def key(self) -> tuple:
        """Fastest first; then less model parallelism, a lower stage, less recompute, a larger micro-batch, fewer
        virtual stages."""
        lay = self.layout
        return (self.step.step_time_s, lay.tp * lay.pp * lay.cp, lay.ep, int(self.stage),
                RECOMPUTE_RANK[self.checkpointing], -self.micro_batch, lay.vpp)


@dataclass
class Tally:
    """What the search weighed, as it goes."""

    configurations: int = 0
    fitting: int = 0
    pruned: Counter = field(default_factory=Counter)
    misses: list[Miss] = field(default_factory=list)
    timed: list[Timed] = field(default_factory=list)
    refined: list[Timed] = field(default_factory=list)  # the 1F1B configurations weighed under interleaving
    variants: list[Timed] = field(default_factory=list)  # the interleaved configurations that fit, timed
    variants_weighed: int = 0  # interleaved configurations (virtual stages x micro-batch) weighed


FSDP2_STAGES = (ZeroStage.zero2, ZeroStage.zero3)  # reshard_after_forward False / True; no ZeRO-0 (memory/engines)


def given_levels(scn: Scenario, policy: AdvisorPolicy) -> tuple[Checkpointing, ...]:
    """The checkpointing levels to try: the given one, then heavier ones when the policy may add them."""
    given = scn.setup.checkpointing
    if given not in MESH_CHECKPOINTING:
        raise ZeroplanError(f"--checkpointing {scn.setup.checkpointing_label} on a tp/pp/cp mesh is not modelled yet; "
                            "give none, selective or full")
    if not policy.consider_checkpointing:
        return (given,)
    return tuple(c for c in MESH_CHECKPOINTING if RECOMPUTE_RANK[c] >= RECOMPUTE_RANK[given])


def search_parallelism(scn: Scenario, model: str | None, policy: AdvisorPolicy = DEFAULT,
                       topology: Topology | None = None, *, global_batch: int | None = None, mfu: float | None = None,
                       stack: Stack = Stack.auto) -> LayoutAdvice:
    """The fastest fitting tp x pp x cp x dp (x ep) x stage x checkpointing x micro-batch for `scn`'s GPUs.

    model: the preset name or config path (the mesh model needs the module descriptions). global_batch: sequences
    per optimizer step (default: the scenario's micro-batch x accumulation x GPUs). Raises ZeroplanError for unusable
    input; nothing fitting is an answer (recommendation null, the trace says the closest miss)."""
    if scn.hardware is None:
        raise ZeroplanError("the parallelism search needs a hardware profile (--hardware)")
    topology = topology or default_topology(scn.hardware, scn.parallelism)
    check_topology(scn.hardware, scn.parallelism, topology)
    pre, planned = planned_scenario(scn)
    gpus = planned.parallelism.gpus
    batch = scn.setup.micro_batch * scn.setup.grad_accum * gpus if global_batch is None else global_batch
    if batch < 1:
        raise ZeroplanError(f"global batch ({batch}) must be positive")
    fitter = Fitter.of(planned, model, budget_bytes(planned.usable_bytes, policy.min_headroom_fraction), batch)
    fsdp2 = planned.engine is Engine.fsdp2
    if fsdp2 and stack is Stack.deepspeed:
        raise ZeroplanError("--stack deepspeed with --engine fsdp2: FSDP2 layouts run on torchtitan (--stack torchtitan)")
    space = enumerate_layouts(planned.arch, gpus, planned.hardware.gpus_per_node, planned.setup.seq_len,
                              planned.setup.attention, batch, Stack.torchtitan if fsdp2 else stack,
                              policy.tp_within_node, planned.setup.loss, two_d=fsdp2)
    if not space.layouts:
        why = "; ".join(f"{reason} ({n})" for reason, n in space.left_out) or "no degrees divide"
        raise ZeroplanError(f"no tp x pp x cp mesh of {gpus} GPUs lays out {planned.model.name} with global batch "
                            f"{batch}: {why}")
    tally, levels, timing = Tally(), given_levels(planned, policy), {}
    for layout in space.layouts:
        for stage in layout.stages():
            if fsdp2 and stage not in FSDP2_STAGES:
                continue
            _weigh(fitter, tally, layout, stage, layout.levels(levels), topology, mfu, timing)
    _interleave(fitter, tally, sorted(tally.timed, key=Timed.key), planned.arch.num_layers, topology, mfu, timing)
    ranked = sorted(tally.timed + tally.variants, key=Timed.key)
    shown = _one_per_mesh(ranked)[:TOP + 1]
    plans = [_plan(fitter, t) for t in shown]
    best, others = (plans[0], tuple(plans[1:])) if plans else (None, ())
    counts = SearchCounts(layouts=len(space.layouts), configurations=tally.configurations,
                          evaluations=fitter.evaluations, fitting=tally.fitting,
                          timed=len(tally.timed) + len(tally.variants), interleaved=tally.variants_weighed,
                          pruned=sum(tally.pruned.values()))
    trace = tuple(pre) + search_trace(space, tally, best, others, fitter, planned, stack, policy)
    return LayoutAdvice(policy=policy, scenario=planned, stack=stack, gpus=gpus, nodes=planned.parallelism.nodes,
                        topology=topology, global_batch=batch, recommendation=best, alternatives=others,
                        trace=trace, counts=counts, assumptions=tuple(_notes(planned)))


def rank_key(plan: LayoutPlan) -> tuple:
    """Timed.key of a shown plan."""
    return (plan.step_time_s, plan.tp * plan.pp * plan.cp, plan.ep, int(plan.stage),
            RECOMPUTE_RANK[plan.checkpointing], -plan.micro_batch, plan.vpp)


def _interleave(fitter: Fitter, tally: Tally, ranked: list[Timed], num_layers: int, topology: Topology,
                mfu: float | None, timing: dict) -> None:
    """Weigh the pipelined (torchtitan) 1F1B configurations of `ranked` under interleaved 1F1B with each of their
    virtual-stage counts (space.virtual_stages) at the same micro-batch, in order of their step less their bubble,
    while that bound is below the fastest step found so far; micro-batches whose accumulation PyTorch's rounds
    refuse are skipped (memory.activations.pipeline.rounds_divide). Sound under the models where a rank's chunks
    hold the layers its 1F1B stage holds (docs/advisor.md, "Schedules")."""
    best = ranked[0].step.step_time_s if ranked else float("inf")
    piped = [t for t in ranked if t.layout.pp > 1 and t.layout.stack is Stack.torchtitan]
    for t in sorted(piped, key=lambda t: t.step.step_time_s - t.step.bubble_s):
        if t.step.step_time_s - t.step.bubble_s >= best:
            tally.pruned["interleaving not weighed: 1F1B's step less its whole bubble is already slower than the "
                          "fastest"] += 1
            continue
        tally.refined.append(t)
        m = fitter.per_rank(t.layout) // t.micro_batch
        if not rounds_divide(t.layout.pp, m):
            continue
        for v in virtual_stages(num_layers, t.layout.pp):
            variant = replace(t.layout, vpp=v)
            tally.variants_weighed += 1
            est = fitter.peak(variant, t.stage, t.checkpointing, t.micro_batch)
            if fitter.fits(est):
                step = speed.step(fitter.scenario(variant, t.stage, t.checkpointing, t.micro_batch), t.stage,
                                  topology, mfu, timing)
                tally.variants.append(Timed(variant, t.stage, t.checkpointing, t.micro_batch, step, est))
                best = min(best, step.step_time_s)


def _one_per_mesh(ranked: list[Timed]) -> list[Timed]:
    seen, kept = set(), []
    for t in ranked:
        mesh = (t.layout.tp, t.layout.pp, t.layout.cp, t.layout.ep)
        if mesh not in seen:
            seen.add(mesh)
            kept.append(t)
    return kept


def _weigh(fitter: Fitter, tally: Tally, layout: Layout, stage: ZeroStage, levels: tuple[Checkpointing, ...],
           topology: Topology, mfu: float | None, timing: dict) -> None:
    """Fit and time one layout x stage over its checkpointing levels (the pruning rules in the module docstring)."""
    tally.configurations += len(levels)
    heaviest = levels[-1]
    at_one = fitter.peak(layout, stage, heaviest, 1)
    if not fitter.fits(at_one):
        tally.misses.append(Miss(layout, stage, heaviest, at_one.total, at_one.base.states.total,
                                 at_one.activations))
        if len(levels) > 1:
            tally.pruned["lighter checkpointing skipped: the most recompute does not fit at micro-batch 1"] += \
                len(levels) - 1
        return
    for i, ckpt in enumerate(levels):
        micro, est = fitter.largest(layout, stage, ckpt, at_one if ckpt is heaviest else None)
        if not micro:
            continue
        tally.fitting += 1
        sizes = [m for m in fitter.micro_batches(layout) if m <= micro] if layout.pp > 1 else [micro]
        for m in sizes:
            step = speed.step(fitter.scenario(layout, stage, ckpt, m), stage, topology, mfu, timing)
            tally.timed.append(Timed(layout, stage, ckpt, m, step, est if m == micro else None))
        if micro == fitter.per_rank(layout) and i + 1 < len(levels):
            tally.pruned["heavier checkpointing skipped: a lighter level already fits the whole per-rank batch in "
                         "one micro-batch"] += len(levels) - i - 1
            return


def _plan(fitter: Fitter, t: Timed) -> LayoutPlan:
    layout, stage, ckpt, micro, s = t.layout, t.stage, t.checkpointing, t.micro_batch, t.step
    est = t.peak or fitter.peak(layout, stage, ckpt, micro)
    return LayoutPlan(
        tp=layout.tp, pp=layout.pp, cp=layout.cp, ep=layout.ep, dp=layout.dp,
        sequence_parallel=layout.sequence_parallel, stack=layout.stack, schedule=layout.schedule, vpp=layout.vpp,
        stage=stage, checkpointing=ckpt,
        micro_batch=micro, grad_accum=fitter.per_rank(layout) // micro, peak_bytes=est.total, usable_bytes=est.usable_bytes,
        headroom_bytes=est.headroom_bytes, busiest=est.base.notes[0] if est.base.notes else "",
        step_time_s=s.step_time_s, compute_s=s.compute_s, tp_s=s.tp_s, cp_exposed_s=s.cp_exposed_s, ep_s=s.ep_s,
        p2p_s=s.p2p_s, bubble_s=s.bubble_s, zero_exposed_s=s.zero_exposed_s,
        tokens_per_s_per_gpu=s.tokens_per_s_per_gpu, mfu=s.mfu)


def _notes(scn: Scenario) -> list[str]:
    return [
        (f"model, sequence length {scn.setup.seq_len}, precision {scn.setup.precision.value} and the global batch "
         "as given; the search chooses the mesh, the ZeRO stage, checkpointing and the micro-batch"),
        ("memory: zeroplan's mesh model (docs/parallelism.md), the busiest rank, the same peak `zeroplan estimate "
         "--tp .. --pp .. --cp .. --ep ..` prints; no offload searched (run `zeroplan advise` without "
         "--search-parallelism for offload on data parallelism)"),
        ("torchtitan layouts are sized with zeroplan's DeepSpeed ZeRO model at the equivalent stage (FSDP2 "
         "reshard_after_forward=True ~ ZeRO-3, False ~ ZeRO-2, DDP ~ ZeRO-0; docs/parallelism.md compares them)"),
        ("step time: zeroplan.perf.mesh (docs/throughput.md, Mesh): compute, TP, CP, EP, the pipeline bubble of "
         "the schedule, point-to-point and ZeRO's exposed collectives over the data-parallel group"),
        ("schedules: 1F1B everywhere, then interleaved 1F1B for the pipelined configurations whose step less its "
         "bubble could still win; zero-bubble schedules are not searched (their activation memory is a stated lower "
         "bound, docs/parallelism.md)"),
        "DeepSpeed's overlap_comm default per stage (on for ZeRO-3 only)",
    ]
