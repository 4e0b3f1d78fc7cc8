"""The source article's decision tree (its section 4.3, docs/advisor.md), its questions and leaves as written.

    ZeRO-0 fits?            yes -> "use ZeRO-0 for the best performance"
    ZeRO-2 fits?            yes -> "choose ZeRO-2 to balance performance and memory"
    NVLink/NVSwitch?        no  -> "consider model simplification or hardware upgrade"
                            yes -> "use ZeRO-3", qualified by:
    batch size > 512?       yes -> "ZeRO-3 is acceptable"; no -> "try a larger batch size, or use ZeRO-2"

The tree never asks whether ZeRO-3 fits; zeroplan adds that one question (guard.fits) after the leaf, so it
never recommends what does not fit. Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from zeroplan.advise.advice import Recommendation, Step
from zeroplan.advise.candidates import Context, fit_at, fits, make_plan
from zeroplan.advise.steps import FIT_SOURCE, NO_OFFLOAD, fit_step, nothing, recommend
from zeroplan.memory.setup import ZeroStage

ARTICLE_TREE = "article 4.3 decision tree (docs/advisor.md)"
# The article's leaves, as written (translated; docs/advisor.md).
LEAF_ZERO0 = "use ZeRO-0 for the best performance"
LEAF_ZERO2 = "choose ZeRO-2 to balance performance and memory"
LEAF_ZERO3 = "use ZeRO-3"
LEAF_GIVE_UP = "consider model simplification or hardware upgrade"
LEAF_BATCH_YES = "ZeRO-3 is acceptable"
LEAF_BATCH_NO = "try a larger batch size, or use ZeRO-2"


def article_tree(ctx: Context) -> tuple[list[Step], Recommendation]:
    """The article's flowchart as written; "batch size > 512" qualifies the ZeRO-3 choice (docs/advisor.md)."""
    given, policy = ctx.scn.setup.checkpointing, ctx.policy
    steps = []
    for stage, rule, question, leaf in (
        (ZeroStage.zero0, "article.zero0-fits", "Can the model be fully loaded with ZeRO-0?", LEAF_ZERO0),
        (ZeroStage.zero2, "article.zero2-fits", "Does ZeRO-2 meet the memory requirement?", LEAF_ZERO2),
    ):
        est = fit_at(ctx, stage, NO_OFFLOAD, given)
        steps.append(fit_step(ctx, rule, question, est, leaf, f"{ARTICLE_TREE}; {FIT_SOURCE}"))
        if fits(ctx, est):
            return steps, recommend(ctx, make_plan(ctx, stage, NO_OFFLOAD, given, 1), leaf)
    nvlink = ctx.topology in policy.zero3_topologies
    steps.append(Step(rule="article.nvlink", question="NVLink/NVSwitch environment?", observed=ctx.topology.value,
                      threshold=", ".join(t.value for t in policy.zero3_topologies),
                      source=policy.source("zero3_topologies"), outcome="yes" if nvlink else "no",
                      reason=LEAF_ZERO3 if nvlink else LEAF_GIVE_UP))
    if not nvlink:
        return steps, nothing(ctx, LEAF_GIVE_UP)
    large = ctx.global_batch > policy.zero3_min_global_batch
    steps.append(Step(rule="article.batch-512", question=f"Batch size > {policy.zero3_min_global_batch}?",
                      observed=ctx.global_batch, threshold=policy.zero3_min_global_batch, unit="sequences",
                      source=policy.source("zero3_min_global_batch"), outcome="yes" if large else "no",
                      reason=LEAF_BATCH_YES if large else LEAF_BATCH_NO))
    leaf = f"{LEAF_ZERO3}; {LEAF_BATCH_YES if large else LEAF_BATCH_NO}"
    est = fit_at(ctx, ZeroStage.zero3, NO_OFFLOAD, given)
    steps.append(fit_step(ctx, "guard.fits", "Does ZeRO-3 fit? (zeroplan's check: the article never asks)", est,
                           "the article's leaf fits"))
    if not fits(ctx, est):
        return steps, nothing(ctx, f"the article says '{LEAF_ZERO3}', but ZeRO-3 does not fit: nothing recommended")
    return steps, recommend(ctx, make_plan(ctx, ZeroStage.zero3, NO_OFFLOAD, given, 1), leaf)
