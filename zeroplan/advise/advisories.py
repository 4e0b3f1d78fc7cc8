"""The article's other rules (4.1, 4.2, 5.2), applied to a recommendation as advisories, corrected where wrong.

Each advisory is a Step and appears only where it applies: PCIe -> ZeRO-2, multi-node -> compression (1-bit
Adam corrected to ZeRO++), embedding-heavy models, long sequences, and gradient accumulation with ZeRO-3
(corrected: it does not amortize ZeRO-3's gathers). Corrections: docs/advisor.md (Advisories), DeepSpeed
v0.19.6 runtime/engine.py (1-bit Adam), ZeRO++ (arXiv:2306.10209). Pure: imports neither rich, typer nor yaml and
does no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.advise.advice import Plan, Recommendation, Step
from zeroplan.advise.candidates import Context, candidate, throughput
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import ZeroStage

ONEBIT_SOURCE = ("article 4.1 'multi-node: gradient compression such as 1-bit Adam'; DeepSpeed engine.py asserts "
                 "'1bit-Adam is not compatible with ZeRO' at stage > 0 "
                 "(deepspeedai/DeepSpeed@edaa7221:deepspeed/runtime/engine.py)")
ZEROPP_SOURCE = ("ZeRO++ (arXiv:2306.10209; DeepSpeed docs/_tutorials/zeropp.md): qwZ INT8 weights, qgZ INT4 "
                 "gradients, hpZ gathers inside a node")


def _zeropp_overhead(ctx: Context, plan: Plan) -> float:
    """Predicted ZeRO-3 overhead with qwZ + qgZ + hpZ over the GPUs of one node."""
    scn = candidate(ctx, plan.stage, (plan.offload_optimizer, plan.offload_param), plan.checkpointing, plan.micro_batch,
                    plan.overlap_comm)
    knobs = replace(scn.knobs, zero_quantized_weights=True, zero_quantized_gradients=True,
                    zero_hpz_partition_size=scn.parallelism.gpus_per_node)
    return throughput(ctx, replace(scn, knobs=knobs), plan.stage).overhead_vs_zero0_pct


def _pcie(ctx: Context, plan: Plan) -> Step:
    if plan.stage is not ZeroStage.zero3:
        reason = f"ZeRO-{int(plan.stage)} already avoids ZeRO-3's per-micro-step gathers over PCIe"
    else:
        reason = ("no lower stage fits with this offload and checkpointing; ZeRO-3's gathers cross PCIe every "
                  "micro-step (observed: its predicted overhead)")
    return Step(rule="advice.pcie-zero2", question="PCIe system: prefer ZeRO-2?",
                observed=round(plan.overhead_vs_zero0_pct, 2), unit="percent",
                source="article 4.1 'PCIe systems: prefer ZeRO-2'", outcome="applies", reason=reason)


def _multinode(ctx: Context, plan: Plan) -> Step:
    stage = int(plan.stage)
    if plan.stage is ZeroStage.zero0:
        reason = "1-bit Adam works at stage 0 only, which this is: it compresses the gradient all-reduce"
    elif plan.stage is ZeroStage.zero3:
        reason = (f"1-bit Adam is not compatible with ZeRO-{stage} in DeepSpeed; ZeRO++ (qwZ + qgZ + hpZ "
                  f"{ctx.scn.parallelism.gpus_per_node}) is predicted to cut the overhead to "
                  f"{_zeropp_overhead(ctx, plan):.1f} %; hpZ's secondary partition costs memory (zeroplan estimate "
                  "--hpz-partition-size)")
    else:
        reason = (f"1-bit Adam is not compatible with ZeRO-{stage} in DeepSpeed, and ZeRO++ acts on stage 3 only; "
                  f"ZeRO-{stage} moves data parallelism's 2 Psi per step (observed: its predicted overhead)")
    return Step(rule="correct.onebit-adam", question="Multi-node: compress gradients with 1-bit Adam?",
                observed=round(plan.overhead_vs_zero0_pct, 2), unit="percent",
                source=f"{ONEBIT_SOURCE}; {ZEROPP_SOURCE}",
                outcome="corrected", reason=reason)


def _embedding(ctx: Context, plan: Plan) -> Step | None:
    model = ctx.scn.model
    if not model.num_embedding_params:
        return None
    share = model.num_embedding_params / model.num_params
    limit = ctx.policy.embedding_heavy_fraction
    if share < limit:
        return None
    return Step(rule="advice.embedding-heavy", question="Embedding-heavy model: prefer ZeRO-3?",
                observed=round(share, 4),
                threshold=limit, unit="fraction", source=ctx.policy.source("embedding_heavy_fraction"),
                outcome="applies", reason="ZeRO-3 shards the embedding like any weight, which helps only when model "
                "states limit the fit; the b x s x vocab logits it feeds are activations, which no stage shards")


def _long_sequence(ctx: Context, plan: Plan) -> Step | None:
    seq, limit = ctx.scn.setup.seq_len, ctx.policy.long_sequence_tokens
    if seq <= limit:
        return None
    return Step(rule="advice.long-sequence", question="Long sequences: does ZeRO-3's advantage grow?", observed=seq,
                threshold=limit, unit="tokens", source=ctx.policy.source("long_sequence_tokens"), outcome="applies",
                reason="partly: more tokens per micro-step amortize ZeRO-3's gathers, but activation memory grows "
                "with the sequence and no ZeRO stage shards it")


def _grad_accum(ctx: Context, plan: Plan) -> Step | None:
    if plan.stage is not ZeroStage.zero3:
        return None
    scn = candidate(ctx, plan.stage, (plan.offload_optimizer, plan.offload_param), plan.checkpointing, 1,
                    plan.overlap_comm)
    at_one = throughput(ctx, scn, plan.stage).overhead_vs_zero0_pct
    return Step(rule="correct.grad-accum", question=f"Accumulate >= {ctx.policy.article_zero3_min_grad_accum} "
                "micro-steps to amortize ZeRO-3?", observed=plan.grad_accum,
                threshold=ctx.policy.article_zero3_min_grad_accum,
                source=ctx.policy.source("article_zero3_min_grad_accum"),
                outcome="corrected", reason=f"ZeRO-3 re-gathers parameters every micro-step, so accumulation does not "
                f"amortize them, the micro-batch does: predicted overhead {plan.overhead_vs_zero0_pct:.1f} % at "
                f"micro-batch {plan.micro_batch} x {plan.grad_accum}, {at_one:.1f} % at 1 x {ctx.per_gpu}")


def advisories(ctx: Context, rec: Recommendation) -> tuple[Step, ...]:
    """The advisories that apply to a fitting recommendation (none when nothing fits)."""
    plan = rec.plan
    if plan is None:
        return ()
    found = []
    if ctx.topology is Topology.pcie:
        found.append(_pcie(ctx, plan))
    if ctx.topology is Topology.multinode:
        found.append(_multinode(ctx, plan))
    found += [_embedding(ctx, plan), _long_sequence(ctx, plan), _grad_accum(ctx, plan)]
    return tuple(step for step in found if step is not None)
