"""The plain-dict view of the parallelism search: what `zeroplan advise --search-parallelism --format json|yaml`
prints (schema: docs/json.md). The result objects dumped, so table and JSON cannot drift. Pure."""

from __future__ import annotations

from zeroplan.advise.layouts.result import LayoutAdvice
from zeroplan.advise.view import policy_view
from zeroplan.memory.view import calibration_keys
from zeroplan.validate import as_json
from zeroplan.version import SCHEMA_VERSION, __version__


def layout_advice_view(advice: LayoutAdvice) -> dict:
    scn = advice.scenario
    rec = advice.recommendation
    return {
        "schema_version": SCHEMA_VERSION,
        "zeroplan_version": __version__,
        "search": "parallelism",
        "model": as_json(scn.model),
        "model_assumed": advice.model_assumed,
        "hardware": scn.hardware.name,
        "usable_bytes": scn.usable_bytes,
        "gpus": advice.gpus,
        "nodes": advice.nodes,
        "topology": advice.topology.value,
        "global_batch": advice.global_batch,
        "stack": advice.stack.value,
        "setup": as_json(scn.setup, exclude={"micro_batch", "grad_accum", "checkpointing"}),  # the search sizes them
        "recipe": scn.recipe.name,
        "policy": policy_view(advice.policy),
        "recommendation": {**rec.model_dump(mode="json"), "summary": rec.describe()} if rec else None,
        "alternatives": [plan.model_dump(mode="json") for plan in advice.alternatives],
        "trace": [step.model_dump(mode="json") for step in advice.trace],
        "counts": advice.counts.model_dump(mode="json"),
        "assumptions": list(advice.assumptions),
        **calibration_keys(scn.overheads),
    }
