"""Per-family tensor groups that autograd saves in one transformer layer, embedding and head.

Pure: imports neither rich, typer, yaml nor torch and does no I/O. Each function returns
(name, bytes) pairs in the symbols of zeroplan.activations (T = b s tokens, e bytes per element).
Where a count comes from is the Hugging Face module named in its comment (transformers 5.x), and
validation/measure_activations.py checks every one against torch.autograd.graph.saved_tensors_hooks.
"""

from __future__ import annotations

from zeroplan.memory.activations.traits import (
    ACTIVATIONS_SAVING_OUTPUT,
    GEMMA_FAMILIES,
    T5_FAMILIES,
    Traits,
    activation_saved_tensors,
)
from zeroplan.models.architecture import Architecture

FP32_BYTES = 4  # fp32 statistics, upcasts, softmax outputs
INDEX_BYTES = 8  # int64 token ids, labels, position ids, top-k and permutation indices
MASK_BYTES = 1  # dropout mask: CUDA's native_dropout keeps a bool per element
OFFSET_BYTES = 4  # int32 per-expert offsets that grouped_mm keeps
ROTARY_TABLES = 2  # cos and sin, 1 x s x rotary dims each, computed once and shared by all layers
LAYERNORM_STATS = 2  # native_layer_norm keeps mean and rstd per token
QKV = 3  # q, k and v
GATE_PRODUCT_INPUTS = 2  # act(gate) and up, both saved by their product (SwiGLU/GeGLU)
EXPERT_INDEX_TENSORS = 3  # grouped_mm_experts_forward: gather index (perm // k), sort permutation, inverse
PRE_AND_POST_NORMS = 4  # norms_per_layer of Gemma 2 (post-attention and post-MLP norms besides the pre-norms)
MASK_KINDS_WITH_SLIDING = 2  # Gemma 2 alternates full and sliding-window layers: two dense masks
T5_DECODER_BIASES = 2  # a later T5 decoder layer receives the self-attention bias and a zero cross bias

# Norm implementations, by what they save (counts per token unless said otherwise):
#   llama: LlamaRMSNorm  -> fp32 input (the upcast, or the input itself in fp32), rsqrt, normed in e
#   gemma: Gemma2RMSNorm -> fp32 input, rsqrt, normed in fp32, and (1 + weight) in fp32 (h elements)
#   t5:    T5LayerNorm   -> fp32 upcast (16-bit only), the input itself, rsqrt, normed in e
#   layernorm: native_layer_norm -> input, mean and rstd (fp32 on CUDA: the accumulate type)


def norm_bytes(style: str, tokens: int, h: int, e: int) -> int:
    """Bytes one norm saves for tokens x h inputs in compute dtype e."""
    upcast = FP32_BYTES * tokens * h if e < FP32_BYTES else 0
    stats = FP32_BYTES * tokens  # rsqrt (RMSNorm) or one of mean/rstd (LayerNorm)
    if style == "llama":
        return FP32_BYTES * tokens * h + stats + e * tokens * h
    if style == "gemma":
        return FP32_BYTES * tokens * h + stats + FP32_BYTES * tokens * h + FP32_BYTES * h
    if style == "t5":
        return upcast + e * tokens * h + stats + e * tokens * h
    return e * tokens * h + LAYERNORM_STATS * stats


def layer_input_saved_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> int:
    """Bytes of a layer's saved set that are its input tensor itself (already kept by a checkpoint)."""
    if traits.norm in ("llama", "gemma"):
        return e * b * s * arch.hidden_size if e == FP32_BYTES else 0
    return e * b * s * arch.hidden_size


def recompute_held_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool, full: bool) -> int:
    """Tensors a checkpointed layer (full) or core (selective) re-reads in backward, kept until then.

    Dense b x 1 x s x s eager masks in e (Gemma 2: a full and a sliding one; flash: none), T5's
    1 x a x s x s position biases handed from layer to layer, and (full) the int64 position ids
    that rotary and OPT layers take as an argument, or BLOOM's ALiBi bias.
    """
    kinds = MASK_KINDS_WITH_SLIDING if _two_mask_kinds(arch) else 1
    masks = 0 if flash and not traits.eager_only else kinds * e * b * s * s
    biases = 0
    if full and arch.family in T5_FAMILIES:  # checkpointed T5Blocks hand them on as arguments
        later_encoder = arch.num_encoder_layers > 1
        later_decoder = arch.num_layers > 1
        biases = (int(later_encoder) + T5_DECODER_BIASES * int(later_decoder)) * e * arch.num_attention_heads * s * s
    takes_positions = traits.rope or traits.per_token_positions  # LlamaDecoderLayer, OPTDecoderLayer arguments
    position_ids = INDEX_BYTES * (b * s if traits.per_token_positions else s) if full and takes_positions else 0
    alibi = e * b * arch.num_attention_heads * s if full and traits.alibi else 0  # BloomModel's (b a, 1, s) bias
    return masks + biases + position_ids + alibi


def _two_mask_kinds(arch: Architecture) -> bool:
    return arch.sliding_window is not None and arch.family in GEMMA_FAMILIES and arch.num_layers > 1


def recompute_extra_bytes(arch: Architecture, s: int) -> int:
    """Recomputed beyond a layer's saved set: T5's first layer rebuilds the s x s int64 position buckets."""
    return INDEX_BYTES * s * s if arch.family in T5_FAMILIES else 0


def _drop(traits: Traits, site: str, elements: int) -> int:
    return MASK_BYTES * elements if site in traits.dropout_sites else 0


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
    if b > 1:
        return QKV
    return 2 if gqa else 0  # repeat_kv's k and v


def flash_output_copy(traits: Traits) -> bool:
    """SDPA's output takes q's memory layout. Rotary q from a fused projection is a contiguous
    (b, a, s, d) tensor, so the output needs a transposed copy for the output projection; elsewhere q is
    (b, s, a, d) in memory and the output projection reads the kernel's output as it is."""
    return traits.fused_qkv and traits.rope


def core_recompute_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool) -> int:
    """What recomputing one attention core in backward allocates (selective checkpointing)."""
    t, a, d = b * s, arch.num_attention_heads, arch.head_dim
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


def attention_terms(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool, selective: bool, cross: bool = False
) -> list[tuple[str, int]]:
    """One attention sub-layer: pre-norm, projection input, core, output projection input, dropout."""
    t, h = b * s, arch.hidden_size
    out = e * t * arch.num_attention_heads * arch.head_dim
    name = "cross-attention q projection input" if cross else "q/k/v projection input"  # k/v read the encoder
    terms = [("attention norm", norm_bytes(traits.norm, t, h, e)), (name, e * t * h)]
    if selective:
        terms += selective_core_terms(arch, traits, b, s, e)
    elif flash and not traits.eager_only:
        terms += flash_core_terms(arch, traits, b, s, e)
    else:
        terms += eager_core_terms(arch, traits, b, s, e) + [("output projection input", out)]
    terms.append(("attention output dropout mask", _drop(traits, "attn_out", t * h)))
    if arch.norms_per_layer == PRE_AND_POST_NORMS:
        terms.append(("post-attention norm", norm_bytes(traits.norm, t, h, e)))
    return terms


def mlp_norm_terms(arch: Architecture, traits: Traits, tokens: int, e: int) -> list[tuple[str, int]]:
    """The MLP's norm and input. Parallel attention (GPT-NeoX, Falcon) normalises the same x twice, so
    the MLP norm's input is already kept; with one shared norm the MLP reads the attention's input."""
    h = arch.hidden_size
    if arch.parallel_attn and arch.norms_per_layer == 1:
        return []
    norm = norm_bytes(traits.norm, tokens, h, e)
    if arch.parallel_attn:
        norm -= e * tokens * h  # LayerNorm's saved input is the attention norm's
    return [("MLP norm", norm), ("MLP input", e * tokens * h)]


def _activation_bytes(traits: Traits, elements: int, e: int) -> int:
    return activation_saved_tensors(traits) * e * elements


def dense_mlp_terms(arch: Architecture, traits: Traits, tokens: int, e: int) -> list[tuple[str, int]]:
    """GPT-2 / T5 MLP (up, act, down) or SwiGLU/GeGLU (gate, up, act x up, down)."""
    inner = tokens * arch.intermediate_size
    if "mlp_inner" in traits.dropout_sites:
        down_input = (MASK_BYTES + e) * inner  # dropout mask and its output, the down projection's input
    elif traits.act in ACTIVATIONS_SAVING_OUTPUT and not arch.gated_mlp:
        down_input = 0  # relu's saved output is the down projection's input
    else:
        down_input = e * inner
    terms = [("activation", _activation_bytes(traits, inner, e))]
    if arch.gated_mlp:
        terms.append(("activation output and up projection (gate product)", GATE_PRODUCT_INPUTS * e * inner))
    terms.append(("down projection input", down_input))
    return terms


def moe_mlp_terms(arch: Architecture, tokens: int, e: int, traits: Traits) -> list[tuple[str, int]]:
    """Top-k router and grouped_mm experts (HF integrations/moe.py, MixtralTopKRouter)."""
    h, f, n_exp = arch.hidden_size, arch.intermediate_size, arch.num_experts
    routed = tokens * arch.num_experts_per_tok  # S: token-expert pairs
    router = FP32_BYTES * tokens * n_exp + INDEX_BYTES * routed + FP32_BYTES * tokens + FP32_BYTES * routed
    indices = EXPERT_INDEX_TENSORS * INDEX_BYTES * routed + OFFSET_BYTES * n_exp
    widths = GATE_PRODUCT_INPUTS if arch.gated_mlp else 1
    gate_up = widths * e * routed * f  # the fused gate_up output, kept whole through the gate view
    extra_act = _activation_bytes(traits, routed * f, e) - e * routed * f  # Python activations keep more
    inner = widths * e * routed * f  # act output (the up half is a view of gate_up) and down input
    return [
        ("router softmax, top-k indices and weights", router),
        ("expert routing indices and offsets", indices),
        ("tokens gathered per expert", e * routed * h),
        ("expert gate/up outputs", gate_up + extra_act),
        ("expert activation output and down input", inner),
        ("expert outputs and routing weights", e * routed * h + FP32_BYTES * routed),
    ]


def layer_terms(
    arch: Architecture,
    traits: Traits,
    b: int,
    s: int,
    e: int,
    *,
    flash: bool,
    selective: bool,
    encoder: bool = False,
) -> list[tuple[str, int]]:
    """One decoder layer (encoder=True: one T5 encoder layer, no cross-attention)."""
    if encoder and not arch.num_encoder_layers:
        return []
    t = b * s
    terms = attention_terms(arch, traits, b, s, e, flash=flash, selective=selective)
    if arch.num_encoder_layers and not encoder:
        terms += attention_terms(arch, traits, b, s, e, flash=flash, selective=selective, cross=True)
    terms += mlp_norm_terms(arch, traits, t, e)
    terms += moe_mlp_terms(arch, t, e, traits) if arch.is_moe else dense_mlp_terms(arch, traits, t, e)
    terms.append(("MLP output dropout mask", _drop(traits, "mlp_out", t * arch.hidden_size)))
    if arch.norms_per_layer == PRE_AND_POST_NORMS:
        terms.append(("post-MLP norm", norm_bytes(traits.norm, t, arch.hidden_size, e)))
    return [(n, v) for n, v in terms if v]


def embedding_terms(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, *, full: bool = False
) -> list[tuple[str, int]]:
    """Token ids (embedding backward), position tables or ids, embedding norm and dropout.

    T5's relative position buckets are made inside each stack's first layer: under full checkpointing
    only the recompute makes them again (recompute_extra_bytes).
    """
    t = b * s
    stacks = 2 if arch.num_encoder_layers else 1
    terms = [("token ids", stacks * INDEX_BYTES * t)]
    if traits.rope:
        rotary_dims = int(arch.head_dim * traits.rotary_fraction)
        terms.append(("rotary cos and sin tables (1 x s x rotary dims)", ROTARY_TABLES * e * s * rotary_dims))
    if arch.learned_positions:
        terms.append(("position ids", INDEX_BYTES * (t if traits.per_token_positions else s)))
    if arch.family in T5_FAMILIES and not full:
        terms.append(("relative position buckets (s x s per stack)", stacks * INDEX_BYTES * s * s))
    if arch.family in GEMMA_FAMILIES:
        terms.append(("embedding scale (0-d)", e))
    if traits.embedding_norm:
        terms.append(("embedding norm", norm_bytes(traits.norm, t, arch.hidden_size, e)))
    terms.append(("embedding dropout mask", stacks * _drop(traits, "embed", t * arch.hidden_size)))
    return [(n, v) for n, v in terms if v]


def final_norm_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """Final norm(s) and the LM head's input; T5 adds the encoder's and its output kept for cross-attention."""
    t, h = b * s, arch.hidden_size
    stacks = 2 if arch.num_encoder_layers else 1
    terms = [
        ("final norm", stacks * norm_bytes(traits.norm, t, h, e)),
        ("final dropout mask", stacks * _drop(traits, "final", t * h)),
        ("LM head input", e * t * h),
    ]
    if arch.num_encoder_layers:
        terms.append(("encoder output (cross-attention k/v input)", e * t * h))
    return [(n, v) for n, v in terms if v]
