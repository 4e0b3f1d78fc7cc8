"""Plain-dict views of the advisor's answer: what `zeroplan advise --format json|yaml` prints, and `zeroplan.to_dict`
gives.

The Advice objects dumped, plus the policy's sources, so table and JSON cannot drift. Bytes stay integers.
Pure: no rich, typer or yaml. Schema: docs/advisor.md.
"""

from __future__ import annotations

from zeroplan.advise.advice import Advice
from zeroplan.advise.policy import THRESHOLDS, AdvisorPolicy
from zeroplan.memory.view import calibration_keys
from zeroplan.validate import as_json
from zeroplan.version import SCHEMA_VERSION, __version__


def policy_view(policy: AdvisorPolicy) -> dict:
    """{"name", "tree", "thresholds": {key: {"value", "source"}}}."""
    values = policy.model_dump(mode="json")
    return {"name": policy.name, "tree": policy.tree.value,
            "thresholds": {k: {"value": values[k], "source": policy.source(k)} for k in THRESHOLDS}}


def advice_view(advice: Advice) -> dict:
    scn = advice.scenario
    return {
        "schema_version": SCHEMA_VERSION,
        "zeroplan_version": __version__,
        "model": as_json(scn.model),
        "model_assumed": advice.model_assumed,
        "hardware": scn.hardware.name,
        "usable_bytes": scn.usable_bytes,
        "parallelism": {"gpus": scn.parallelism.gpus, "nodes": scn.parallelism.nodes, "dp": scn.parallelism.dp},
        "setup": as_json(scn.setup, exclude={"micro_batch", "grad_accum"}),  # the advisor sizes them
        "recipe": scn.recipe.name,
        "policy": policy_view(advice.policy),
        "recommendation": advice.recommendation.model_dump(mode="json"),
        "trace": [step.model_dump(mode="json") for step in advice.trace],
        "advisories": [step.model_dump(mode="json") for step in advice.advisories],
        "alternatives": [plan.model_dump(mode="json") for plan in advice.alternatives],
        "assumptions": list(advice.assumptions),
        **calibration_keys(scn.overheads),
        "verdict": _verdict(advice),
    }


def _verdict(advice: Advice) -> dict | None:
    """The first line's facts (advise/verdict.py; docs/json.md, "verdict"): what it is about, fit, headroom, the
    term that breaks the fit."""
    from zeroplan.advise.verdict import advice_verdict
    from zeroplan.memory.view import verdict_view

    found = advice_verdict(advice)
    return None if found is None else {"about": found[0], **verdict_view(found[1])}
