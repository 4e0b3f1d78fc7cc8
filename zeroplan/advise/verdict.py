"""advise's verdict: the recommendation's fit and headroom, or, when nothing fits, the closest configuration the
trace tried and the term that breaks it (memory/verdict.py). Read from the advice's own numbers; the timeline's
moment and the breaking term are added only where evaluating that configuration again gives the advice's peak
to the byte."""

from dataclasses import replace

from zeroplan.advise.advice import Advice, Step
from zeroplan.advise.advisor import recommended_scenario
from zeroplan.memory.engines import supported_stages
from zeroplan.memory.estimate import evaluate
from zeroplan.memory.setup import Checkpointing, ZeroStage
from zeroplan.memory.verdict import Verdict, stage_verdict

FIT_RULE_PREFIX = "fit.zero"  # "Does ZeRO-N fit at micro-batch 1?" (advise/trees/default.py)
CKPT_RULE_PREFIX = "ckpt."  # "Does a stage fit with full activation checkpointing?": its observed is the smallest peak


def advice_verdict(advice: Advice) -> tuple[str, Verdict] | None:
    """(what it is about, its verdict): the recommended plan, or the closest the trace tried when nothing fits."""
    rec = advice.recommendation
    if rec.fits and rec.plan is not None:
        plan, scn = rec.plan, recommended_scenario(advice)
        found = Verdict(True, plan.peak_bytes, plan.usable_bytes, "")
        again = _again(scn, (plan.stage,), found)
        return f"ZeRO-{int(plan.stage)}", again[1] if again else found
    tried = [s for s in advice.trace if _sized(s)]
    if not tried:
        return None
    closest = min(tried, key=lambda s: s.observed)
    scn = advice.scenario
    stages = supported_stages(scn.engine)
    if closest.rule.startswith(CKPT_RULE_PREFIX):
        level = Checkpointing(closest.rule.removeprefix(CKPT_RULE_PREFIX))
        scn = replace(scn, setup=replace(scn.setup, checkpointing=level))
    else:
        stages = (ZeroStage(int(closest.rule.removeprefix(FIT_RULE_PREFIX))),)
    found = Verdict(False, closest.observed, closest.threshold, "")
    again = _again(scn, stages, found)
    words = f"checkpointing {scn.setup.checkpointing.value}, micro-batch 1"
    return (f"nothing fits; closest, ZeRO-{int(again[0])} ({words})", again[1]) if again else (f"nothing fits; closest ({words})", found)


def _sized(step: Step) -> bool:
    return (step.rule.startswith((FIT_RULE_PREFIX, CKPT_RULE_PREFIX)) and step.unit == "bytes"
            and isinstance(step.observed, int) and isinstance(step.threshold, int))


def _again(scn, stages, found: Verdict) -> tuple[ZeroStage, Verdict] | None:
    """The stage among `stages` whose evaluation of `scn` gives `found`'s peak to the byte, with its verdict."""
    if scn is None:
        return None
    for stage in stages:
        again = stage_verdict(evaluate(scn, stage))
        if again is not None and (again.peak_bytes, again.usable_bytes) == (found.peak_bytes, found.usable_bytes):
            return stage, again
    return None
