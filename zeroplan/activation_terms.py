"""Per-family tensor groups that autograd saves in one transformer layer, embedding and head.

Pure: imports neither rich, typer, yaml nor torch and does no I/O. Each function returns
(name, bytes) pairs in the symbols of zeroplan.activations (T = b s tokens, e bytes per element).
Where a count comes from is the Hugging Face module named in its comment (transformers 5.x), and
validation/measure_activations.py checks every one against torch.autograd.graph.saved_tensors_hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.spec import Architecture

FP32_BYTES = 4  # fp32 statistics, upcasts, softmax outputs
INDEX_BYTES = 8  # int64 token ids, labels, position ids, top-k and permutation indices
MASK_BYTES = 1  # dropout mask: CUDA's native_dropout keeps a bool per element
OFFSET_BYTES = 4  # int32 per-expert offsets that grouped_mm keeps

# Norm implementations, by what they save (counts per token unless said otherwise):
#   llama: LlamaRMSNorm  -> fp32 input (the upcast, or the input itself in fp32), rsqrt, normed in e
#   gemma: Gemma2RMSNorm -> fp32 input, rsqrt, normed in fp32, and (1 + weight) in fp32 (h elements)
#   t5:    T5LayerNorm   -> fp32 upcast (16-bit only), the input itself, rsqrt, normed in e
#   layernorm: native_layer_norm -> input, mean and rstd (fp32 on CUDA: the accumulate type)
GEMMA_FAMILIES = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
T5_FAMILIES = frozenset({"t5", "mt5", "umt5"})
FUSED_QKV_FAMILIES = frozenset({"gpt2"})  # one c_attn matmul, q/k/v are views of its output

# Tensors an activation saves, each T x f (HF activations.py): native kernels save one (silu and gelu
# their input, relu its output); NewGELUActivation is Python: input, tanh output, 0.5 x, 1 + tanh.
ACTIVATION_SAVED_TENSORS = {"gelu_new": 4}
DEFAULT_ACTIVATION_SAVED_TENSORS = 1
ACTIVATIONS_SAVING_OUTPUT = frozenset({"relu"})


@dataclass(frozen=True)
class Traits:
    """How a family's HF modules save tensors; derived from the Architecture, never stored."""

    norm: str  # llama | gemma | t5 | layernorm
    rope: bool  # rotary cos/sin tables, shared by all layers
    fused_qkv: bool
    softmax_fp32: bool  # eager softmax computed in fp32 (dtype=torch.float32), then cast to e
    dropout_sites: frozenset[str]  # embed, attn_probs, attn_out, mlp_inner, mlp_out, final
    loss_upcast: bool  # ForCausalLMLoss .float(); T5 calls CrossEntropyLoss on the 16-bit logits
    act: str


def traits_of(arch: Architecture) -> Traits:
    family = arch.family
    return Traits(
        norm=_norm_style(arch),
        rope=arch.learned_positions == 0 and family not in T5_FAMILIES,
        fused_qkv=family in FUSED_QKV_FAMILIES,
        softmax_fp32=family not in FUSED_QKV_FAMILIES | T5_FAMILIES,
        dropout_sites=_dropout_sites(arch),
        loss_upcast=family not in T5_FAMILIES,
        act=_activation(arch),
    )


def _norm_style(arch: Architecture) -> str:
    if arch.family in GEMMA_FAMILIES:
        return "gemma"
    if arch.family in T5_FAMILIES:
        return "t5"
    return "layernorm" if arch.norm == "layernorm" else "llama"


# Where a family's hidden dropout (Architecture.dropout) applies, per its HF modules; the attention
# probabilities use Architecture.attention_dropout in every family.
HIDDEN_DROPOUT_SITES = {
    "gpt2": frozenset({"embed", "attn_out", "mlp_out"}),  # GPT2Model.drop (embd_pdrop taken = resid_pdrop)
    "t5": frozenset({"embed", "attn_out", "mlp_inner", "mlp_out", "final"}),  # T5Stack, T5LayerFF, T5DenseActDense
}
DEFAULT_HIDDEN_DROPOUT_SITES = frozenset({"attn_out", "mlp_out"})  # residual-branch dropout (Phi-3, OPT, GPT-NeoX)


def _dropout_sites(arch: Architecture) -> frozenset[str]:
    family = "t5" if arch.family in T5_FAMILIES else arch.family
    hidden = HIDDEN_DROPOUT_SITES.get(family, DEFAULT_HIDDEN_DROPOUT_SITES) if arch.dropout > 0 else frozenset()
    return hidden | ({"attn_probs"} if arch.attention_dropout > 0 else frozenset())


def _activation(arch: Architecture) -> str:
    """The HF hidden_act each family's configs use (T5 v1.1's gated-gelu is gelu_new)."""
    if arch.family in FUSED_QKV_FAMILIES or (arch.family in T5_FAMILIES and arch.gated_mlp):
        return "gelu_new"
    if arch.family in T5_FAMILIES:
        return "relu"
    return "gelu_pytorch_tanh" if arch.family in GEMMA_FAMILIES else "silu"


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
    return e * tokens * h + 2 * stats


def layer_input_saved_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> int:
    """Bytes of a layer's saved set that are its input tensor itself (already kept by a checkpoint)."""
    if traits.norm in ("llama", "gemma"):
        return e * b * s * arch.hidden_size if e == FP32_BYTES else 0
    return e * b * s * arch.hidden_size


def recompute_held_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool, full: bool) -> int:
    """Tensors a checkpointed layer (full) or core (selective) re-reads in backward, kept until then.

    Dense b x 1 x s x s eager masks in e (Gemma 2: a full and a sliding one; flash: none), T5's
    1 x a x s x s position biases handed from layer to layer, and (full) the int64 position ids
    that rotary layers take as an argument.
    """
    masks = 0 if flash else (2 if _two_mask_kinds(arch) else 1) * e * b * s * s
    biases = 0
    if arch.family in T5_FAMILIES:
        later_encoder = arch.num_encoder_layers > 1
        later_decoder = arch.num_layers > 1
        biases = (int(later_encoder) + 2 * int(later_decoder)) * e * arch.num_attention_heads * s * s
    position_ids = INDEX_BYTES * s if full and traits.rope else 0
    return masks + biases + position_ids


def _two_mask_kinds(arch: Architecture) -> bool:
    return arch.sliding_window is not None and arch.family in GEMMA_FAMILIES and arch.num_layers > 1


def recompute_extra_bytes(arch: Architecture, s: int) -> int:
    """Recomputed beyond a layer's saved set: T5's first layer rebuilds the s x s int64 position buckets."""
    return INDEX_BYTES * s * s if arch.family in T5_FAMILIES else 0


def _drop(traits: Traits, site: str, elements: int) -> int:
    return MASK_BYTES * elements if site in traits.dropout_sites else 0


def eager_core_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """softmax(q k^T / sqrt(d)) v with the a x s x s matrices kept (HF eager_attention_forward)."""
    t, a, d = b * s, arch.num_attention_heads, arch.head_dim
    scores = b * a * s * s
    terms = [("q, k, v (a heads: repeat_kv)", 3 * e * t * a * d)]
    if arch.attn_logit_softcapping:
        terms.append(("score soft-capping tanh", e * scores))
    terms.append(("softmax output", (FP32_BYTES if traits.softmax_fp32 else e) * scores))
    if "attn_probs" in traits.dropout_sites:
        terms.append(("probability dropout mask + output", (MASK_BYTES + e) * scores))
    elif traits.softmax_fp32 and e < FP32_BYTES:
        terms.append(("probabilities cast to e", e * scores))
    return terms


def eager_fresh_qkv_copies(arch: Architecture, b: int) -> int:
    """How many of the q, k, v the eager core saves are tensors it made (a recompute makes them again).

    q and k leave the rotary multiply (or the projection's transpose) as (b, s, a, d)-strided views; the
    batched matmul can fold b x a without a copy only when b = 1. With b > 1 all three are copied; with
    b = 1 only repeat_kv's expanded k and v (GQA) are new.
    """
    if b > 1:
        return 3
    return 2 if arch.num_key_value_heads < arch.num_attention_heads else 0


def core_recompute_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool) -> int:
    """What recomputing one attention core in backward allocates (selective checkpointing)."""
    t, a, d = b * s, arch.num_attention_heads, arch.head_dim
    if flash:
        return e * t * a * d + FP32_BYTES * b * a * s  # output and log-sum-exp
    scores = sum(v for _, v in eager_core_terms(arch, traits, b, s, e)[1:])
    return scores + eager_fresh_qkv_copies(arch, b) * e * t * a * d


def flash_core_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """SDPA flash / FlashAttention: q, k, v (g heads), output, fp32 log-sum-exp (b a s); no s x s."""
    t, a, g, d = b * s, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    return [("q, k, v", e * t * (a + 2 * g) * d), ("output", e * t * a * d), ("log-sum-exp", FP32_BYTES * b * a * s)]


def selective_core_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """Core recomputed in backward: only its inputs (before repeat_kv) and its output stay."""
    t, a, g, d = b * s, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    return [("q, k, v (core inputs)", e * t * (a + 2 * g) * d), ("output", e * t * a * d)]


def attention_terms(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool, selective: bool, cross: bool = False
) -> list[tuple[str, int]]:
    """One attention sub-layer: pre-norm, projection input, core, output projection input, dropout."""
    t, h = b * s, arch.hidden_size
    out = e * t * arch.num_attention_heads * arch.head_dim
    terms = [("attention norm", norm_bytes(traits.norm, t, h, e)), ("q/k/v projection input", e * t * h)]
    if selective:
        terms += selective_core_terms(arch, b, s, e)
    elif flash:
        terms += flash_core_terms(arch, b, s, e)
    else:
        terms += eager_core_terms(arch, traits, b, s, e) + [("output projection input", out)]
    if cross:
        terms[1] = ("cross-attention q projection input", e * t * h)  # k/v read the encoder output
    terms.append(("attention output dropout mask", _drop(traits, "attn_out", t * h)))
    if arch.norms_per_layer == 4:
        terms.append(("post-attention norm", norm_bytes(traits.norm, t, h, e)))
    return terms


def _activation_bytes(traits: Traits, elements: int, e: int) -> int:
    return ACTIVATION_SAVED_TENSORS.get(traits.act, DEFAULT_ACTIVATION_SAVED_TENSORS) * e * elements


def dense_mlp_terms(arch: Architecture, traits: Traits, tokens: int, e: int) -> list[tuple[str, int]]:
    """GPT-2 / T5 MLP (up, act, down) or SwiGLU/GeGLU (gate, up, act x up, down)."""
    inner = tokens * arch.intermediate_size
    if "mlp_inner" in traits.dropout_sites:
        down_input = (MASK_BYTES + e) * inner  # dropout mask and its output, the down projection's input
    elif traits.act in ACTIVATIONS_SAVING_OUTPUT and not arch.gated_mlp:
        down_input = 0  # relu's saved output is the down projection's input
    else:
        down_input = e * inner
    terms = [("MLP input", e * tokens * arch.hidden_size), ("activation", _activation_bytes(traits, inner, e))]
    if arch.gated_mlp:
        terms.append(("activation output and up projection (gate product)", 2 * e * inner))
    terms.append(("down projection input", down_input))
    return terms


def moe_mlp_terms(arch: Architecture, tokens: int, e: int, traits: Traits) -> list[tuple[str, int]]:
    """Top-k router and grouped_mm experts (HF integrations/moe.py, MixtralTopKRouter)."""
    h, f, n_exp = arch.hidden_size, arch.intermediate_size, arch.num_experts
    routed = tokens * arch.num_experts_per_tok  # S: token-expert pairs
    router = FP32_BYTES * tokens * n_exp + INDEX_BYTES * routed + FP32_BYTES * tokens + FP32_BYTES * routed
    indices = 3 * INDEX_BYTES * routed + OFFSET_BYTES * n_exp  # gather index, sort permutation, inverse
    gate_up = (2 if arch.gated_mlp else 1) * e * routed * f
    extra_act = _activation_bytes(traits, routed * f, e) - e * routed * f  # Python activations keep more
    inner = (2 if arch.gated_mlp else 1) * e * routed * f  # act output (x up) and down input
    return [
        ("MLP input", e * tokens * h),
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
    terms.append(("MLP norm", norm_bytes(traits.norm, t, arch.hidden_size, e)))
    terms += moe_mlp_terms(arch, t, e, traits) if arch.is_moe else dense_mlp_terms(arch, traits, t, e)
    terms.append(("MLP output dropout mask", _drop(traits, "mlp_out", t * arch.hidden_size)))
    if arch.norms_per_layer == 4:
        terms.append(("post-MLP norm", norm_bytes(traits.norm, t, arch.hidden_size, e)))
    return [(n, v) for n, v in terms if v]


def embedding_terms(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, *, full: bool = False
) -> list[tuple[str, int]]:
    """Token ids (embedding backward), position tables or ids, embedding dropout.

    T5's relative position buckets are made inside each stack's first layer: under full checkpointing
    only the recompute makes them again (recompute_extra_bytes).
    """
    t = b * s
    stacks = 2 if arch.num_encoder_layers else 1
    terms = [("token ids", stacks * INDEX_BYTES * t)]
    if traits.rope:
        terms.append(("rotary cos and sin tables (1 x s x d)", 2 * e * s * arch.head_dim))
    if arch.learned_positions:
        terms.append(("position ids (1 x s)", INDEX_BYTES * s))
    if arch.family in T5_FAMILIES and not full:
        terms.append(("relative position buckets (s x s per stack)", stacks * INDEX_BYTES * s * s))
    if arch.family in GEMMA_FAMILIES:
        terms.append(("embedding scale (0-d)", e))
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
