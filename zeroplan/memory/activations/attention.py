"""What the attention core saves for backward: q, k, v and the output under flash/SDPA, the s x s scores and probabilities under eager attention, what selective checkpointing keeps, and the masks.

Measured against PyTorch's saved tensors (docs/activations.md). Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.memory.activations.llama4 import LLAMA4_FAMILIES, attention_extra_terms
from zeroplan.memory.activations.mla import latent_terms, mla_core_recompute_bytes, mla_core_terms
from zeroplan.memory.activations.ops import (
    FP32_BYTES,
    INDEX_BYTES,
    MASK_BYTES,
    PRE_AND_POST_NORMS,
    dropout_mask_bytes,
    norm_bytes,
)
from zeroplan.memory.activations.traits import (
    T5_FAMILIES,
    Traits,
)
from zeroplan.models.architecture import Architecture

QKV = 3  # q, k and v


def recompute_extra_bytes(arch: Architecture, s: int) -> int:
    """Recomputed beyond a layer's saved set: T5's first layer rebuilds the s x s int64 position buckets."""
    return INDEX_BYTES * s * s if arch.family in T5_FAMILIES else 0


def core_input_bytes(arch: Architecture, traits: Traits, tokens: int, e: int) -> int:
    """q, k, v as the attention core receives them (g heads for k and v).

    Separate projections: q, k rotary outputs (or projection outputs) and v. Fused projection: views
    keep the whole (T, (a + 2g) d) output alive; rotary q and k are new tensors beside it.
    """
    a, g, d = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    qkv = e * tokens * (a + 2 * g) * d
    if not traits.fused_qkv:
        return qkv
    return qkv + (e * tokens * (a + g) * d if traits.rope else 0)


def eager_qkv_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> int:
    """q, k, v the eager batched matmuls keep, k and v repeated to a heads (repeat_kv).

    They arrive as (b, s, a, d)-strided views; the matmul folds b x a without a copy only when b = 1.
    With b > 1 all three are copies of a heads. With b = 1 the views survive: separate projections
    still give three a-head tensors, a fused projection keeps its whole output for the un-rotated ones.
    """
    t, a, g, d = b * s, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    one = e * t * a * d
    if b == 1 and traits.kv_broadcast:
        return e * t * (a + 2 * g) * d  # k and v stay g-head tensors, expanded as views
    if b > 1 or not traits.fused_qkv:
        return QKV * one
    fused = e * t * (a + 2 * g) * d
    gqa = g < a
    if traits.rope:  # q and k are rotary outputs (k repeated for GQA); v is a view unless repeated
        return 2 * one + (one if gqa else fused)
    return fused + (2 * one if gqa else 0)


def eager_core_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """softmax(q k^T / sqrt(d)) v with the a x s x s matrices kept (HF eager attention)."""
    scores = b * arch.num_attention_heads * s * s
    terms = [("q, k, v (a heads)", eager_qkv_bytes(arch, traits, b, s, e))]
    if arch.attn_logit_softcapping:
        terms.append(("score soft-capping tanh", e * scores))
    if arch.attention_sinks:
        # gpt-oss eager_attention_forward: the sink logit joins the scores (s + 1 columns), the max is subtracted
        # (its int64 indices saved) and softmax runs in the compute dtype; the sink column is sliced off.
        return terms + [("max indices", INDEX_BYTES * b * arch.num_attention_heads * s),
                        ("softmax output (with the sink column)", e * b * arch.num_attention_heads * s * (s + 1))]
    terms.append(("softmax output", (FP32_BYTES if traits.softmax_fp32 else e) * scores))
    if "attn_probs" in traits.dropout_sites:
        terms.append(("probability dropout mask + output", (MASK_BYTES + e) * scores))
    elif traits.softmax_fp32 and e < FP32_BYTES:
        terms.append(("probabilities cast to e", e * scores))
    return terms


def eager_fresh_qkv_copies(arch: Architecture, traits: Traits, b: int) -> int:
    """How many of the eager core's saved q, k, v it made itself (its recompute makes them again).

    repeat_kv's k and v (GQA) always; with b > 1 the copies of (b, s, a, d)-strided views (see
    eager_qkv_bytes). Rotary q and k of a fused projection are contiguous already: only v is copied.
    """
    gqa = arch.num_key_value_heads < arch.num_attention_heads and not traits.kv_broadcast
    if traits.fused_qkv and traits.rope:
        return (2 if gqa else 0) + (1 if b > 1 and not gqa else 0)  # repeated k and v, or the copied v
    if b > 1:  # a rotary made by torch.cat (partial rotary, gpt-oss) leaves q contiguous: k and v are copied
        return QKV - 1 if traits.rope and (traits.rotary_fraction < 1 or traits.rotary_by_cat) else QKV
    return 2 if gqa else 0  # repeat_kv's k and v


def arch_rotates_by_cat(traits: Traits) -> bool:
    return traits.rotary_by_cat


def flash_output_copy(traits: Traits) -> bool:
    """SDPA's output takes q's memory layout. Rotary q from a fused projection is a contiguous
    (b, a, s, d) tensor, so the output needs a transposed copy for the output projection; elsewhere q is
    (b, s, a, d) in memory and the output projection reads the kernel's output as it is. Partial rotary
    (GLM-4.5: torch.cat of the rotated and passed halves) makes q a contiguous (b, a, s, d) tensor too, as
    does gpt-oss's rotary (_apply_rotary_emb: torch.cat of the two rotated halves)."""
    return traits.rope and (traits.fused_qkv or traits.rotary_fraction < 1 or arch_rotates_by_cat(traits))


def core_recompute_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool) -> int:
    """What recomputing one attention core in backward allocates (selective checkpointing)."""
    t, a, d = b * s, arch.num_attention_heads, arch.head_dim
    if arch.is_mla:
        return mla_core_recompute_bytes(arch, b, s, e, flash=flash)
    if flash:
        return e * t * a * d + FP32_BYTES * b * a * s  # output and log-sum-exp
    scores = sum(v for _, v in eager_core_terms(arch, traits, b, s, e)[1:])
    return scores + eager_fresh_qkv_copies(arch, traits, b) * e * t * a * d


def flash_core_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """SDPA flash / FlashAttention: q, k, v, output and fp32 log-sum-exp (b a s); nothing s x s."""
    t, a, d = b * s, arch.num_attention_heads, arch.head_dim
    terms = [
        ("q, k, v", core_input_bytes(arch, traits, t, e)),
        ("output", e * t * a * d),
        ("log-sum-exp", FP32_BYTES * b * a * s),
    ]
    if flash_output_copy(traits):
        terms.append(("output projection input (transposed copy)", e * t * a * d))
    return terms


def selective_core_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """Core recomputed in backward: only its inputs (before repeat_kv) and its output stay."""
    t = b * s
    out = e * t * arch.num_attention_heads * arch.head_dim
    return [("q, k, v (core inputs)", core_input_bytes(arch, traits, t, e)), ("output", out)]


def qk_norm_terms(arch: Architecture, traits: Traits, tokens: int, e: int) -> list[tuple[str, int]]:
    """Norms of the projected q and k before rotary: per head (Qwen3RMSNorm, Gemma3RMSNorm over h_d, T a and
    T g rows) or over all heads at once (Olmo2Attention.q_norm over a h_d, k_norm over g h_d). Each saves what
    the family's RMSNorm saves (ops.norm_bytes); the normed q and k go on to rotary as before."""
    a, g, d = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    if traits.qk_norm == "head":
        return [("q norm", norm_bytes(traits.norm, tokens * a, d, e)), ("k norm", norm_bytes(traits.norm, tokens * g, d, e))]
    if traits.qk_norm == "full":
        return [("q norm", norm_bytes(traits.norm, tokens, a * d, e)), ("k norm", norm_bytes(traits.norm, tokens, g * d, e))]
    return []


def attention_terms(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool, selective: bool, cross: bool = False
) -> list[tuple[str, int]]:
    """One attention sub-layer: pre-norm, projection input, core, output projection input, dropout."""
    t, h = b * s, arch.hidden_size
    out = e * t * arch.num_attention_heads * arch.head_dim
    name = "cross-attention q projection input" if cross else "q/k/v projection input"  # k/v read the encoder
    terms = [("attention norm", norm_bytes(traits.norm, t, h, e)), (name, e * t * h)]
    if arch.family in LLAMA4_FAMILIES:  # its qk-norm is a weightless L2 norm on rope layers only
        terms += attention_extra_terms(arch, b, s, e, flash=flash and not selective)
    else:
        terms += qk_norm_terms(arch, traits, t, e)
    if arch.is_mla:
        terms += latent_terms(arch, traits, t, e) + mla_core_terms(arch, b, s, e, flash=flash, selective=selective)
    elif selective:
        terms += selective_core_terms(arch, traits, b, s, e)
    elif flash and not traits.eager_only:
        terms += flash_core_terms(arch, traits, b, s, e)
    else:
        terms += eager_core_terms(arch, traits, b, s, e) + [("output projection input", out)]
    terms.append(("attention output dropout mask", dropout_mask_bytes(traits, "attn_out", t * h)))
    if arch.norms_per_layer == PRE_AND_POST_NORMS:
        terms.append(("post-attention norm", norm_bytes(traits.norm, t, h, e)))
    return terms
