"""The stage advisor: a policy's decision tree over the calculator -> Advice(recommendation, trace, ...).

`advise` plans a scenario at micro-batch 1 on the precision the hardware runs and follows the policy's tree:
the article's as written (advise/trees/article.py) or zeroplan's default (advise/trees/default.py). Neither recommends what
`estimate.evaluate` says does not fit; "nothing fits" is a Recommendation with fits false and, in the default
tree, the smallest change that would fit. Every rule and its source: docs/advisor.md. Pure and deterministic: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.advise.advice import Advice, Step
from zeroplan.advise.advisories import advisories
from zeroplan.advise.candidates import Context, alternatives
from zeroplan.advise.policy import DEFAULT, AdvisorPolicy, Tree
from zeroplan.advise.trees.article import article_tree
from zeroplan.advise.trees.default import default_tree
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.hardware.spec import Topology
from zeroplan.memory.assumptions import scenario_notes
from zeroplan.memory.estimate import Scenario
from zeroplan.memory.setup import Engine, Precision
from zeroplan.perf.collectives import check_topology, default_topology

TREES = {Tree.article: article_tree, Tree.default: default_tree}
BF16 = (Precision.bf16_mixed, Precision.bf16_true)


def _precision(scn: Scenario) -> tuple[list[Step], Scenario]:
    """bf16 on hardware without it becomes fp16 mixed precision, as one step; otherwise nothing changes."""
    hw, precision = scn.hardware, scn.setup.precision
    if precision not in BF16 or hw.supports_bf16:
        return [], scn
    step = Step(rule="precision.fp16", question=f"Does {hw.name} support bf16?", observed=False, threshold=None,
                source="hardware preset supports_bf16; DeepSpeed engine.py refuses bf16 where the device has none",
                outcome="no", reason=f"{precision.value} -> fp16-mixed with dynamic loss scaling (fp16 needs the fp32 "
                "master copy: 16 B/param with AdamW)")
    setup = replace(scn.setup, precision=Precision.fp16_mixed)
    return [step], replace(scn, setup=setup)


def planned_scenario(scn: Scenario) -> tuple[list[Step], Scenario]:
    """The scenario the trees evaluate: micro-batch 1 and accumulation 1 (the trees size them) on the precision the
    hardware runs."""
    steps, scn = _precision(scn)
    setup = replace(scn.setup, micro_batch=1, grad_accum=1)
    return steps, replace(scn, setup=setup)


def _global_batch(scn: Scenario, global_batch: int | None) -> int:
    dp = scn.parallelism.dp
    batch = scn.setup.micro_batch * scn.setup.grad_accum * dp if global_batch is None else global_batch
    if batch < 1 or batch % dp:
        raise ZeroplanError(f"global batch ({batch}) must be a positive multiple of the data-parallel degree ({dp})")
    return batch


def advise(scn: Scenario, policy: AdvisorPolicy = DEFAULT, topology: Topology | None = None, *,
           global_batch: int | None = None, mfu: float | None = None) -> Advice:
    """The recommended stage, offload, micro-batch and checkpointing for `scn`, and the trace of the decision.

    global_batch: sequences per optimizer step over all GPUs (default: the scenario's micro_batch x grad_accum x
    dp); the recommendation keeps it, as micro-batch x accumulation x dp. topology: default from the hardware and
    node count. mfu: the compute efficiency for the step-time predictions (default: the hardware's).
    Raises ZeroplanError only for unusable input (no hardware, impossible topology, a global batch that does
    not divide over the GPUs); a plan that does not fit is an answer.
    """
    if scn.hardware is None:
        raise ZeroplanError("the advisor needs a hardware profile (--hardware)")
    if policy.tree is Tree.article and scn.engine is not Engine.deepspeed:
        raise UsageError(f"--policy article follows the article's tree of DeepSpeed ZeRO stages (0, 2, 3); "
                         f"use --policy default with --engine {scn.engine.value}")
    topology = topology or default_topology(scn.hardware, scn.parallelism)
    check_topology(scn.hardware, scn.parallelism, topology)
    batch = _global_batch(scn, global_batch)
    pre, planned = planned_scenario(scn)
    ctx = Context(scn=planned, policy=policy, topology=topology, global_batch=batch, mfu=mfu)
    steps, rec = TREES[policy.tree](ctx)
    deepspeed = planned.engine is Engine.deepspeed
    notes = scenario_notes(planned, planned.recipe) + _engine_notes(planned) + [
        "fit questions at micro-batch 1; step times per zeroplan.perf at each plan's micro-batch",
    ]
    return Advice(
        policy=policy, scenario=planned, recommendation=rec, trace=tuple(pre + steps),
        advisories=advisories(ctx, rec) if policy.tree is Tree.default and deepspeed else (),
        alternatives=alternatives(ctx, rec.plan), assumptions=tuple(notes),
    )


def _engine_notes(scn: Scenario) -> list[str]:
    if scn.engine is Engine.deepspeed:
        return ["fit questions with DeepSpeed's overlap_comm default (on for stage 3 only); the default tree turns it "
                "on for ZeRO-1/2 when its second reduce bucket fits (rule overlap.comm), as it hides the gradient "
                "reduction"]
    return [f"--engine {scn.engine.value}: only the stages it runs are asked about, with no offload (not modelled "
            "for PyTorch engines); step times per zeroplan.perf's model of the equivalent ZeRO stage (same "
            "collectives per step); the article's advisories are DeepSpeed's and are not applied"]


def recommended_scenario(advice: Advice) -> Scenario | None:
    """The scenario the recommendation runs (its offload, checkpointing, micro-batch, accumulation), or None."""
    rec = advice.recommendation
    if not rec.fits:
        return None
    scn = advice.scenario
    setup = replace(scn.setup, checkpointing=rec.checkpointing, micro_batch=rec.micro_batch, grad_accum=rec.grad_accum)
    # knobs: None off DeepSpeed, where the plan's offload is FSDP's CPU offload (CPUOffload / CPUOffloadPolicy)
    knobs = rec.knobs or replace(scn.knobs, offload_optimizer=rec.offload_optimizer, offload_param=rec.offload_param)
    return replace(scn, setup=setup, knobs=knobs)
