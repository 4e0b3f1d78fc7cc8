"""The parallelism search's trace: the space, what was left out, what fits, what was pruned, the choice and why it
beat the next mesh (docs/advisor.md, "Parallelism search"). Pure: no I/O."""

from __future__ import annotations

from zeroplan.advise.advice import Step
from zeroplan.advise.layouts.result import LayoutPlan
from zeroplan.advise.layouts.space import Space, Stack
from zeroplan.units import Unit, format_bytes

SPACE_SOURCE = ("Megatron-LM megatron/training/arguments.py divisibility checks (zeroplan/models/mesh.py); tp within "
                "a node: Narayanan et al. 2021, arXiv:2104.04473, 3.3; policy tp_within_node")
FIT_SOURCE = "hardware preset memory_gib; the busiest rank's peak per zeroplan's mesh model (docs/parallelism.md)"
SPEED_SOURCE = "zeroplan.perf.mesh (docs/throughput.md, Mesh)"
# The step-time parts a comparison names, as MeshStep calls them.
PARTS = {"compute_s": "compute", "tp_s": "TP collectives", "cp_exposed_s": "exposed CP ring or all-to-all", "ep_s": "EP all-to-all",
         "p2p_s": "pipeline sends", "bubble_s": "pipeline bubble", "zero_exposed_s": "exposed ZeRO collectives"}


def gib(n: int) -> str:
    return format_bytes(n, Unit.gib)


def _degrees(space: Space) -> str:
    d = space.degrees
    text = (f"tp in {list(d['tp'])}, pp in {list(d['pp'])}, cp in {list(d['cp'])}"
            + (f", ep in {list(d['ep'])}" if d["ep"] != (1,) else ""))
    return text


def search_trace(space: Space, tally, best: LayoutPlan | None, others: tuple[LayoutPlan, ...], fitter, scn,
                 stack: Stack, policy) -> tuple[Step, ...]:
    arch = scn.arch
    steps = [Step(
        rule="search.space", question=f"Which tp x pp x cp meshes of {scn.parallelism.gpus} GPUs lay the model out?",
        observed=len(space.layouts), source=SPACE_SOURCE, outcome="yes" if space.layouts else "no",
        reason=f"{_degrees(space)} ({arch.num_attention_heads} heads, {arch.num_key_value_heads} kv heads, "
               f"{arch.num_layers} layers, sequence {scn.setup.seq_len}, {scn.hardware.gpus_per_node} GPUs per node); "
               f"stack {stack.value}")]
    if space.left_out:
        steps.append(Step(rule="search.left-out", question="Which degrees and meshes were left out, and why?",
                          observed=sum(n for _, n in space.left_out), source=SPACE_SOURCE, outcome="applies",
                          reason="; ".join(f"{n} x {why}" for why, n in space.left_out)))
    steps.append(_fit_step(tally, fitter))
    if tally.pruned:
        steps.append(Step(rule="search.pruned", question="Which combinations did a cheaper one answer for?",
                          observed=sum(tally.pruned.values()), source="the pruning rules of docs/advisor.md",
                          outcome="applies", reason="; ".join(f"{n} x {why}" for why, n in tally.pruned.items())))
    if best is None:
        return tuple(steps + [_none_step(tally, fitter)])
    steps.append(Step(rule="search.best", question="Which fitting configuration has the shortest predicted step time?",
                      observed=round(best.step_time_s, 6), unit="seconds", source=SPEED_SOURCE, outcome="chosen",
                      reason=f"{best.describe()}: {best.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU "
                             f"{best.mfu:.1%}, peak {gib(best.peak_bytes)} of {gib(best.usable_bytes)}"))
    steps.append(_schedule_step(tally, best, fitter))
    if others:
        steps.append(_versus(best, others[0]))
    return tuple(steps)


SCHEDULE_SOURCE = ("bubble (p - 1) / m under 1F1B, (p - 1) / (v m) interleaved, v x the sends (Narayanan et al. 2021, "
                   "arXiv:2104.04473, 2.2); in-flight chunks: PyTorch's ScheduleInterleaved1F1B (docs/parallelism.md)")
ZERO_BUBBLE_LEFT = ("zero-bubble schedules (zbv, interleaved-zb) not searched: the search weighs 1F1B and interleaved "
                    "1F1B only; `zeroplan estimate --pp-schedule zbv|interleaved-zb` estimates them (measured on torch "
                    "2.13 within 1.2 %, up to 12 % over on interleaved-zb's last rank, docs/parallelism.md)")


def _on_mesh(timed, mesh) -> list:
    return sorted((t for t in timed if (t.layout.tp, t.layout.pp, t.layout.cp, t.layout.ep) == mesh),
                  key=lambda t: t.key())


def _pipeline(t, fitter) -> str:
    """One configuration's pipeline side: schedule, bubble, sends, peak and activations."""
    est = t.peak or fitter.peak(t.layout, t.stage, t.checkpointing, t.micro_batch)
    s, lay = t.step, t.layout
    name = f"{lay.schedule.value}" + (f" vpp {lay.vpp}" if lay.vpp > 1 else "")
    return (f"{name} (micro-batch {t.micro_batch} x {fitter.per_rank(lay) // t.micro_batch}): step {s.step_time_s:.3f} "
            f"s, bubble {s.bubble_s:.3f} s ({s.bubble_s / s.step_time_s:.1%}), pipeline sends {s.p2p_s:.3f} s, "
            f"peak {gib(est.total)} (activations {gib(est.activations)})")


def _schedule_step(tally, best: LayoutPlan, fitter) -> Step:
    """Why the chosen layout runs 1F1B or interleaved 1F1B: the bubble against the extra sends and in-flight memory."""
    flat, inter = _on_mesh(tally.timed, best.mesh_key), _on_mesh(tally.variants, best.mesh_key)
    weighed = (f"{tally.variants_weighed} interleaved variants of {len(tally.refined)} pipelined 1F1B configurations "
               f"weighed (those whose step less its bubble could still win), {len(tally.variants)} fit")
    if best.pp == 1:
        fastest = min(tally.variants, key=lambda t: t.key(), default=None)
        reason = f"no pipeline in the chosen layout; {weighed}" + (
            f", the fastest {fastest.layout.describe()} at {fastest.step.step_time_s:.3f} s" if fastest else "")
        outcome = "1f1b"
    elif best.vpp > 1:
        reason = f"interleaved wins on this mesh: {_pipeline(inter[0], fitter)}; against " + (
            _pipeline(flat[0], fitter) if flat else "no 1F1B configuration of this mesh") + f"; {weighed}"
        outcome = "interleaved"
    else:
        reason = f"1F1B kept on this mesh: {_pipeline(flat[0], fitter)}; against " + (
            _pipeline(inter[0], fitter) if inter else "no interleaved variant of this mesh that fits") + f"; {weighed}"
        outcome = "1f1b"
    return Step(rule="search.schedule", question="Which pipeline schedule: 1F1B, or interleaved with virtual stages?",
                observed=best.vpp, source=SCHEDULE_SOURCE, outcome=outcome, reason=f"{reason}; {ZERO_BUBBLE_LEFT}")


def _fit_step(tally, fitter) -> Step:
    closest = min(tally.misses, key=lambda m: m.peak_bytes, default=None)
    reason = (f"{tally.fitting} of {tally.configurations} layout x stage x checkpointing combinations fit within "
              f"{gib(fitter.budget)}")
    if closest is not None:
        reason += (f"; closest that does not: {closest.layout.describe()}, ZeRO-{int(closest.stage)}, "
                   f"{closest.checkpointing.value} checkpointing, micro-batch 1 needs {gib(closest.peak_bytes)} "
                   f"({gib(closest.peak_bytes - fitter.budget)} over; model states {gib(closest.states_bytes)}, "
                   f"activations {gib(closest.activation_bytes)})")
    return Step(rule="search.fit", question="Which combinations fit at micro-batch 1 or more?", observed=tally.fitting, source=FIT_SOURCE, outcome="yes" if tally.fitting else "no",
                reason=reason)


def _none_step(tally, fitter) -> Step:
    closest = min(tally.misses, key=lambda m: m.peak_bytes, default=None)
    where = (f"closest: {closest.layout.describe()} at ZeRO-{int(closest.stage)} needs {gib(closest.peak_bytes)} "
             f"(model states {gib(closest.states_bytes)}, activations {gib(closest.activation_bytes)})"
             if closest else "no layout was weighed")
    return Step(rule="search.none", question="Does any layout fit?", observed=False, source=FIT_SOURCE, outcome="none",
                reason=f"{where}; more GPUs, or `zeroplan advise` without --search-parallelism for offload")


def _versus(best: LayoutPlan, runner: LayoutPlan) -> Step:
    """Why `best` beat the fastest configuration on another mesh: the parts of the step that differ most."""
    diffs = sorted(PARTS, key=lambda k: -abs(getattr(runner, k) - getattr(best, k)))[:2]
    parts = ", ".join(f"{PARTS[k]} {getattr(best, k):.3f} s vs {getattr(runner, k):.3f} s" for k in diffs)
    gain = (runner.step_time_s / best.step_time_s - 1) * 100 if best.step_time_s else 0.0
    return Step(rule="search.runner-up", question="Does it beat the fastest configuration on another mesh?",
                observed=round(best.step_time_s, 6), threshold=round(runner.step_time_s, 6), unit="seconds",
                source=SPEED_SOURCE, outcome="yes" if gain > 0 else "tie",
                reason=f"{gain:.1f} % faster than {runner.describe()}: {parts}")
