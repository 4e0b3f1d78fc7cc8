"""Gemma 4's decoder layer as autograd saves it (transformers==5.25.0:models/gemma4/modeling_gemma4.py).

Pure: no I/O. What differs from Gemma 3's block (memory.activations.terms), each checked against
validation/activations_new_families.json (validation/measure_new_families.py, the gemma4_text cases):

- Gemma4RMSNorm: hidden.float() squared and averaged, torch.pow(mean_squared, -0.5), the normed fp32 x times
  weight.float(): it keeps the fp32 input, the mean square and its power (two T-row fp32 tensors), the normed fp32 x,
  and in 16 bits the weight's fp32 copy (ops.norm_bytes style "gemma4"). v_norm has no weight (with_scale=False):
  the fp32 input and the two T-row tensors only.
- global (full_attention) layers attend with their own head width and kv heads (gemma4_variant resolves them);
- a kv-sharing layer (the last num_kv_shared_layers) builds no k/v: its core reads the last earlier layer's of its
  type, already kept, so only q, the output and the log-sum-exp are new (eager: repeat_kv's copies are new);
- attention_k_eq_v: the keys' projection output is the values' too (in fp32 v_norm's input is k_norm's, one tensor);
- per-layer inputs (PLE): the gate's input, its activation's input and output, the projection's input, a fifth
  norm; the combined per-layer inputs (b s L p) are the model's (embedding terms);
- the MoE block beside the MLP: its router (a weightless norm, the scale products, softmax and top-k) and the experts
  on the norm of the layer's residual, two more norms and the sum of both branches;
- layer_scalar: a 1-element buffer every layer multiplies by (e bytes kept).
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.memory.activations.attention import (
    core_recompute_bytes,
    eager_core_terms,
    flash_core_terms,
    selective_core_terms,
)
from zeroplan.memory.activations.ops import FP32_BYTES, norm_bytes
from zeroplan.memory.activations.traits import Traits, activation_saves
from zeroplan.models.architecture import Architecture

GEMMA4_FAMILIES = frozenset({"gemma4_text", "gemma4"})
FULL = "full_attention"
DOUBLE_WIDE = 2  # Gemma4TextMLP: 2 x intermediate_size in a kv-sharing layer with use_double_wide_mlp
EMBEDDING_SCALES = 2  # embed_tokens and embed_tokens_per_layer each keep their 0-d scale


def gemma4_variant(layer: Architecture, shared: bool) -> Architecture:
    """One Gemma 4 layer kind: a full_attention layer's own head width and kv heads; a kv-sharing layer marked by
    kv_shared_layers = num_layers (every layer of this kind shares) with its MLP double-wide where the config says."""
    full = layer.attention_type(0) == FULL
    head_dim = (layer.global_head_dim or layer.head_dim) if full else layer.head_dim
    kv = (layer.global_key_value_heads or layer.num_key_value_heads) if full else layer.num_key_value_heads
    wide = DOUBLE_WIDE if shared and layer.double_wide_mlp else 1
    dense = layer.dense_intermediate_size if layer.is_moe else layer.intermediate_size
    return replace(layer, head_dim=head_dim, num_key_value_heads=kv, attention_k_eq_v=layer.attention_k_eq_v and full,
                   kv_shared_layers=layer.num_layers if shared else 0,
                   **{"dense_intermediate_size" if layer.is_moe else "intermediate_size": dense * wide})


def shares_kv(layer: Architecture) -> bool:
    """A layer kind (gemma4_variant) whose layers reuse an earlier layer's k and v."""
    return layer.kv_shared_layers >= layer.num_layers > 0


def core_traits(arch: Architecture, traits: Traits, b: int) -> Traits:
    """One kv head and b = 1: repeat_kv's expand-reshape is a view, and the eager matmuls keep the g-head k and v
    (as Falcon's broadcast does: traits.kv_broadcast)."""
    return replace(traits, kv_broadcast=True) if arch.num_key_value_heads == 1 and b == 1 else traits


def core_recompute(kinds: list[Architecture], traits: Traits, b: int, s: int, e: int, *, flash: bool) -> int:
    """Selective checkpointing's recompute: the largest layer kind's (moe.layer_variants) attention core."""
    return max(core_recompute_bytes(k, core_traits(k, traits, b), b, s, e, flash=flash) for k in kinds)


def _core(arch: Architecture, traits: Traits, b: int, s: int, e: int, flash: bool, selective: bool):
    t, a, g, d = b * s, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    if selective:
        terms = selective_core_terms(arch, traits, b, s, e)
    elif flash:
        terms = flash_core_terms(arch, traits, b, s, e)
    else:
        terms = eager_core_terms(arch, core_traits(arch, traits, b), b, s, e) + [("output projection input",
                                                                                  e * t * a * d)]
    if not shares_kv(arch):
        return terms
    # the k and v the producer layer kept: flash and selective keep them as received (g heads); eager keeps
    # repeat_kv's a-head copies, new in every layer, unless there is nothing to repeat (g = a, b = 1: views)
    reused = 2 * e * t * g * d if (flash or selective) else (2 * e * t * a * d if g == a and b == 1 else 0)
    return [(f"{name} (k and v: an earlier layer's, {reused} B kept there)", value - reused)
            if name.startswith("q, k, v") else (name, value) for name, value in terms]


def gemma4_attention_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool,
                           selective: bool) -> list[tuple[str, int]]:
    t, h, a, g, d = b * s, arch.hidden_size, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    norm = traits.norm
    terms = [("attention norm", norm_bytes(norm, t, h, e)), ("q/k/v projection input", e * t * h),
             ("q norm", norm_bytes(norm, t * a, d, e))]
    if not shares_kv(arch):
        # v_norm: fp32 input (in fp32 with k_eq_v, k_norm's input itself) and the two T-row fp32 tensors
        upcast = 0 if arch.attention_k_eq_v and e == FP32_BYTES else FP32_BYTES * t * g * d
        terms += [("k norm", norm_bytes(norm, t * g, d, e)), ("v norm (no weight)", upcast + 2 * FP32_BYTES * t * g)]
    terms += _core(arch, traits, b, s, e, flash, selective)
    return terms + [("post-attention norm", norm_bytes(norm, t, h, e))]


def _mlp_terms(traits: Traits, t: int, inner: int, e: int) -> list[tuple[str, int]]:
    """Gemma4TextMLP: act(gate(x)) * up(x), down: the activation's saves, the product's two inputs, down's input."""
    saves = activation_saves(traits)
    return [("activation", (saves.tensors * e + saves.mask_bytes) * t * inner),
            ("activation output and up projection (gate product)", 2 * e * t * inner),
            ("down projection input", e * t * inner)]


def gemma4_mlp_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int,
                     experts: list[tuple[str, int]]) -> list[tuple[str, int]]:
    t, h = b * s, arch.hidden_size
    dense = arch.dense_intermediate_size if arch.is_moe else arch.intermediate_size
    terms = [("MLP norm", norm_bytes(traits.norm, t, h, e)), ("MLP input", e * t * h)]
    terms += _mlp_terms(traits, t, dense, e)
    if arch.is_moe:
        terms += moe_block_terms(arch, traits, t, e, experts)
    terms.append(("post-MLP norm", norm_bytes(traits.norm, t, h, e)))
    p = arch.per_layer_input_size
    if p:
        saves = activation_saves(traits)
        terms += [("per-layer input gate input", e * t * h),
                  ("per-layer input activation", (saves.tensors * e + saves.mask_bytes) * t * p),
                  ("per-layer input product (activation output)", e * t * p),
                  ("per-layer projection input", e * t * p),
                  ("per-layer input norm", norm_bytes(traits.norm, t, h, e))]
    return terms + [("layer scalar", e)]


def moe_block_terms(arch: Architecture, traits: Traits, t: int, e: int,
                    experts: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Gemma4TextRouter and Gemma4TextExperts beside the MLP, on the layer's residual, and the norms around them.

    The router normalises without a weight, multiplies by its scale (keeping the normed input) and projects, then a
    softmax router as memory.activations.moe's (top-k renormalised) whose weights take per_expert_scale[top_k_index];
    the experts are grouped_mm experts (`experts`: terms.moe_mlp_terms, router included). In fp32 the residual
    itself is the norms' saved input, already kept by the MLP's norm.
    """
    h, k, norm = arch.hidden_size, arch.num_experts_per_tok, traits.norm
    residual = FP32_BYTES * t * h if e == FP32_BYTES else 0
    return [("MoE branch: MLP output norm", norm_bytes(norm, t, h, e)),
            ("router norm (no weight)", FP32_BYTES * t * h - residual + 2 * FP32_BYTES * t),
            ("router normed input (scale product)", e * t * h), ("router projection input", e * t * h),
            *experts,
            ("router per-expert scale (gathered) and top-k weights", e * t * k + FP32_BYTES * t * k),
            ("experts' input norm", norm_bytes(norm, t, h, e) - residual),
            ("experts' output norm", norm_bytes(norm, t, h, e))]


def gemma4_layer_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool, selective: bool,
                       experts: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """One Gemma 4 decoder layer (a gemma4_variant); `experts`: its routed experts' terms (terms.moe_mlp_terms)."""
    terms = gemma4_attention_terms(arch, traits, b, s, e, flash=flash, selective=selective)
    return [(n, v) for n, v in terms + gemma4_mlp_terms(arch, traits, b, s, e, experts) if v]


def gemma4_model_terms(arch: Architecture, b: int, s: int, e: int, norm: str, *,
                       full: bool) -> list[tuple[str, int]]:
    """Outside the layers: the rotary tables of each layer type at its own head width, both embeddings' scales, and
    the per-layer inputs' projection input, norm (over b s L rows of p) and combined tensor (b s L p).

    The projection's input is the first layer's input: already kept where that layer keeps its input (full
    checkpointing; in fp32, its first norm's input itself)."""
    widths = {FULL: arch.global_head_dim or arch.head_dim}
    tables = sum(2 * e * s * widths.get(kind, arch.head_dim) for kind in set(arch.attention_types or (FULL,)))
    t, p, layers = b * s, arch.per_layer_input_size, arch.num_layers
    terms = [("rotary cos and sin tables (1 x s x head dim, per layer type)", tables)]
    if not p:
        return terms + [("embedding scale (0-d)", e)]
    return terms + [("embedding scales (0-d, two)", EMBEDDING_SCALES * e),
                    ("per-layer input projection input", 0 if full or e == FP32_BYTES else e * t * arch.hidden_size),
                    ("per-layer input projection norm", norm_bytes(norm, t * layers, p, e)),
                    ("per-layer inputs (b s L p)", e * t * layers * p)]


__all__ = ["GEMMA4_FAMILIES", "gemma4_layer_terms", "gemma4_model_terms", "gemma4_variant"]
