"""Per-family tensor groups that autograd saves in one transformer layer, embedding and head.

Pure: imports neither rich, typer, yaml nor torch and does no I/O. Each function returns
(name, bytes) pairs in the symbols of zeroplan.activations (T = b s tokens, e bytes per element).
Where a count comes from is the Hugging Face module named in its comment (transformers 5.x), and
validation/measure_activations.py checks every one against torch.autograd.graph.saved_tensors_hooks.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.memory.activations.attention import attention_terms
from zeroplan.memory.activations.deepseek_v4 import DEEPSEEK_V4_FAMILIES, head_terms, held_bytes, residual_bytes
from zeroplan.memory.activations.deepseek_v4 import layer_terms as deepseek_v4_layer_terms
from zeroplan.memory.activations.gemma4 import GEMMA4_FAMILIES, gemma4_layer_terms, gemma4_model_terms
from zeroplan.memory.activations.gated_delta import delta_net_terms, is_linear_layer, output_gate_terms
from zeroplan.memory.activations.llama4 import (
    LLAMA4_FAMILIES,
    dense_experts_terms,
    rotary_table_bytes,
)
from zeroplan.memory.activations.moe import (
    CLAMPED_SWIGLU_FAMILIES,
    CLAMPED_SWIGLU_SAVED,
    norm_topk,
    router_terms,
    routing_weight_bytes,
)
from zeroplan.memory.activations.ops import (
    EXPERT_INDEX_TENSORS,
    FP32_BYTES,
    GATE_PRODUCT_INPUTS,
    INDEX_BYTES,
    MASK_BYTES,
    MASK_KINDS_WITH_SLIDING,
    OFFSET_BYTES,
    PRE_AND_POST_NORMS,
    ROTARY_TABLES,
    T5_DECODER_BIASES,
    dropout_mask_bytes,
    norm_bytes,
    two_mask_kinds,
)
from zeroplan.memory.activations.traits import (
    GEMMA_FAMILIES,
    OLMO2_NORM_FAMILIES,
    T5_FAMILIES,
    Traits,
    activation_saves,
)
from zeroplan.models.architecture import Architecture


ROTARY_TERM = "rotary cos and sin tables (1 x s x rotary dims)"
# Qwen3.5's text model expands position_ids to (3, b, s) for its multimodal rotary (transformers==5.25.0
# modeling_qwen3_5.py Qwen3_5TextModel.forward, Qwen3_5TextRotaryEmbedding): its tables are b x s x rotary dims
PER_SAMPLE_ROTARY_FAMILIES = frozenset({"qwen3_5_text", "qwen3_5_moe_text"})  # the term's name (memory.activations.ulysses reads it)


def layer_input_saved_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> int:
    """Bytes of a layer's saved set that are its input tensor itself (already kept by a checkpoint)."""
    if arch.family in DEEPSEEK_V4_FAMILIES:  # its hyper-connection keeps the N input streams
        return residual_bytes(arch, b, s, e)
    if traits.norm in ("llama", "gemma", "gemma4"):
        return e * b * s * arch.hidden_size if e == FP32_BYTES else 0
    return e * b * s * arch.hidden_size


def recompute_held_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int, *, flash: bool, full: bool) -> int:
    """Tensors a checkpointed layer (full) or core (selective) re-reads in backward, kept until then.

    Dense b x 1 x s x s eager masks in e (Gemma 2: a full and a sliding one; flash: none), T5's
    1 x a x s x s position biases handed from layer to layer, and (full) the int64 position ids
    that rotary and OPT layers take as an argument, or BLOOM's ALiBi bias.
    """
    if arch.family in DEEPSEEK_V4_FAMILIES:
        return held_bytes(arch, b, s, e, full=full)
    kinds = MASK_KINDS_WITH_SLIDING if two_mask_kinds(arch) else 1
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
    saves = activation_saves(traits)
    return (saves.tensors * e + saves.mask_bytes) * elements


def dense_mlp_terms(arch: Architecture, traits: Traits, tokens: int, e: int) -> list[tuple[str, int]]:
    """GPT-2 / T5 MLP (up, act, down) or SwiGLU/GeGLU (gate, up, act x up, down).

    An activation that saves its output (relu, sigmoid, tanh) shares it with the op after it: the
    down projection's input (plain MLP) or the gate product's first input (gated).
    """
    inner = tokens * arch.intermediate_size
    shares_output = activation_saves(traits).saves_output
    if "mlp_inner" in traits.dropout_sites:
        down_input = (MASK_BYTES + e) * inner  # dropout mask and its output, the down projection's input
    elif shares_output and not arch.gated_mlp:
        down_input = 0  # the activation's saved output is the down projection's input
    else:
        down_input = e * inner
    terms = [("activation", _activation_bytes(traits, inner, e))]
    if arch.gated_mlp:
        product_inputs = GATE_PRODUCT_INPUTS - (1 if shares_output else 0)
        terms.append(("activation output and up projection (gate product)", product_inputs * e * inner))
    terms.append(("down projection input", down_input))
    return terms


def moe_mlp_terms(arch: Architecture, tokens: int, e: int, traits: Traits) -> list[tuple[str, int]]:
    """Router, grouped_mm experts (HF integrations/moe.py) and shared experts (memory/activations/moe.py)."""
    h, f, n_exp = arch.hidden_size, arch.intermediate_size, arch.num_experts
    routed = tokens * arch.num_experts_per_tok  # S: token-expert pairs
    router = router_terms(arch, tokens, e, norm_topk=norm_topk(arch))
    indices = EXPERT_INDEX_TENSORS * INDEX_BYTES * routed + OFFSET_BYTES * n_exp
    widths = GATE_PRODUCT_INPUTS if arch.gated_mlp else 1
    gate_up = widths * e * routed * f  # the fused gate_up output, kept whole through the gate view
    extra_act = _activation_bytes(traits, routed * f, e) - e * routed * f  # Python activations keep more
    inner = widths * e * routed * f  # act output (the up half is a view of gate_up) and down input
    if arch.family in CLAMPED_SWIGLU_FAMILIES:
        # GptOssExperts._apply_gate: clamped gate and its sigmoid(alpha x), up + 1 and the glu (their product's
        # inputs), then the down input; the expert biases add a fourth index tensor (the bias gather).
        indices += INDEX_BYTES * routed
        extra_act, inner = 0, CLAMPED_SWIGLU_SAVED * e * routed * f
    terms = router + [
        ("expert routing indices and offsets", indices),
        ("tokens gathered per expert", e * routed * h),
        ("expert gate/up outputs", gate_up + extra_act),
        ("expert activation output and down input", inner),
        ("expert outputs and routing weights", e * routed * h + routing_weight_bytes(arch, e) * routed),
    ]
    if arch.shared_expert_intermediate_size:  # reads the MoE input, already kept (DeepseekV3MoE.shared_experts)
        shared = replace(arch, intermediate_size=arch.shared_expert_intermediate_size)
        terms += [(f"shared expert {name}", v) for name, v in dense_mlp_terms(shared, traits, tokens, e)]
    if arch.shared_expert_gate:  # sigmoid(shared_expert_gate(x)) * shared_expert_output: both factors kept
        terms.append(("shared expert gate (sigmoid output, shared output)", e * tokens + e * tokens * h))
    return terms


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
    if arch.family in DEEPSEEK_V4_FAMILIES:
        return deepseek_v4_layer_terms(arch, traits, b, s, e, selective=selective)
    if arch.family in GEMMA4_FAMILIES:
        experts = moe_mlp_terms(arch, t, e, traits) if arch.is_moe else []
        return gemma4_layer_terms(arch, traits, b, s, e, flash=flash, selective=selective, experts=experts)
    if is_linear_layer(arch):  # Qwen3-Next / Qwen3.5: the gated delta net in place of attention
        terms = [("attention norm", norm_bytes(traits.norm, t, arch.hidden_size, e)),
                 ("delta net input projections' input", e * t * arch.hidden_size)] + delta_net_terms(arch, b, s, e)
    else:
        terms = attention_terms(arch, traits, b, s, e, flash=flash, selective=selective)
        terms += output_gate_terms(arch, b, s, e)
    if arch.num_encoder_layers and not encoder:
        terms += attention_terms(arch, traits, b, s, e, flash=flash, selective=selective, cross=True)
    terms += mlp_norm_terms(arch, traits, t, e)
    if arch.is_moe and arch.family in LLAMA4_FAMILIES:  # every expert on every token, and a shared expert
        shared = replace(arch, intermediate_size=arch.shared_expert_intermediate_size or arch.intermediate_size)
        terms += dense_experts_terms(arch, t, e)
        terms += [(f"shared expert {n}", v) for n, v in dense_mlp_terms(shared, traits, t, e)]
    else:
        terms += moe_mlp_terms(arch, t, e, traits) if arch.is_moe else dense_mlp_terms(arch, traits, t, e)
    terms.append(("MLP output dropout mask", dropout_mask_bytes(traits, "mlp_out", t * arch.hidden_size)))
    if arch.norms_per_layer == PRE_AND_POST_NORMS:
        terms.append(("post-MLP norm", norm_bytes(traits.norm, t, arch.hidden_size, e)))
    return [(n, v) for n, v in terms if v]


def rotary_table_sets(arch: Architecture) -> int:
    """Gemma 3 computes one cos/sin pair per layer type present (Gemma3TextModel.forward: rotary_emb(..., layer_type)
    for each of set(layer_types), local and global bases); the others one pair for all layers."""
    if arch.family in GEMMA_FAMILIES and arch.attention_types:
        return len(set(arch.attention_types))
    return 1


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
    if arch.family in GEMMA4_FAMILIES:
        return terms + gemma4_model_terms(arch, b, s, e, traits.norm, full=full)
    if arch.family in DEEPSEEK_V4_FAMILIES:  # each layer makes its own rotary tables
        return terms
    if traits.rope:
        rotary_dims = arch.qk_rope_head_dim if arch.is_mla else int(arch.head_dim * traits.rotary_fraction)
        if traits.rotary_by_cat:
            rotary_dims //= 2
        table = FP32_BYTES if arch.family in OLMO2_NORM_FAMILIES else e  # Olmo2RotaryEmbedding returns fp32 tables
        sets = rotary_table_sets(arch)
        tables = sets * ROTARY_TABLES * table * s * rotary_dims * (b if arch.family in PER_SAMPLE_ROTARY_FAMILIES else 1)
        if arch.family in LLAMA4_FAMILIES:
            tables = rotary_table_bytes(arch, s)
        terms.append((ROTARY_TERM, tables))
    if arch.learned_positions:
        terms.append(("position ids", INDEX_BYTES * (t if traits.per_token_positions else s)))
    if arch.family in T5_FAMILIES and not full:
        terms.append(("relative position buckets (s x s per stack)", stacks * INDEX_BYTES * s * s))
    if arch.family in GEMMA_FAMILIES:
        terms.append(("embedding scale (0-d)", e))
    if traits.embedding_norm:
        terms.append(("embedding norm", norm_bytes(traits.norm, t, arch.hidden_size, e)))
    terms.append(("embedding dropout mask", stacks * dropout_mask_bytes(traits, "embed", t * arch.hidden_size)))
    return [(n, v) for n, v in terms if v]


def final_norm_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """Final norm(s) and the LM head's input; T5 adds the encoder's and its output kept for cross-attention."""
    t, h = b * s, arch.hidden_size
    if arch.family in DEEPSEEK_V4_FAMILIES:
        return [(n, v) for n, v in head_terms(arch, b, s, e) if v]
    stacks = 2 if arch.num_encoder_layers else 1
    terms = [
        ("final norm", stacks * norm_bytes(traits.norm, t, h, e)),
        ("final dropout mask", stacks * dropout_mask_bytes(traits, "final", t * h)),
        ("LM head input", e * t * h),
    ]
    if arch.num_encoder_layers:
        terms.append(("encoder output (cross-attention k/v input)", e * t * h))
    return [(n, v) for n, v in terms if v]
