"""Bytes single ops save for backward, shared by the layer's terms: element sizes, norms, dropout masks.

Pure: no I/O. The counts are PyTorch's saved tensors (docs/activations.md).
"""

from __future__ import annotations

from zeroplan.memory.activations.traits import GEMMA_FAMILIES, Traits
from zeroplan.models.architecture import Architecture

FP32_BYTES = 4  # fp32 statistics, upcasts, softmax outputs
INDEX_BYTES = 8  # int64 token ids, labels, position ids, top-k and permutation indices
MASK_BYTES = 1  # dropout mask: CUDA's native_dropout keeps a bool per element
OFFSET_BYTES = 4  # int32 per-expert offsets that grouped_mm keeps
ROTARY_TABLES = 2  # cos and sin, 1 x s x rotary dims each, computed once and shared by all layers
LAYERNORM_STATS = 2  # native_layer_norm keeps mean and rstd per token
COHERE_NORM_TENSORS = 3  # CohereLayerNorm's fp32 tokens x h tensors saved: x - mean twice, the normalised x
GATE_PRODUCT_INPUTS = 2  # act(gate) and up, both saved by their product (SwiGLU/GeGLU)
EXPERT_INDEX_TENSORS = 3  # grouped_mm_experts_forward: gather index (perm // k), sort permutation, inverse
PRE_AND_POST_NORMS = 4  # norms_per_layer of Gemma 2 (post-attention and post-MLP norms besides the pre-norms)
T5_DECODER_BIASES = 2  # a later T5 decoder layer receives the self-attention bias and a zero cross bias

# Norm implementations, by what they save (counts per token unless said otherwise):
#   llama: LlamaRMSNorm  -> fp32 input (the upcast, or the input itself in fp32), rsqrt, normed in e
#   gemma: Gemma2RMSNorm -> fp32 input, rsqrt, normed in fp32, and (1 + weight) in fp32 (h elements)
#   gemma4: Gemma4RMSNorm -> fp32 input, mean square and its -0.5 power, normed in fp32, weight.float() (16-bit)
#   olmo2: Olmo2RMSNorm  -> fp32 input, rsqrt, normed in fp32 (the weight multiplies before the cast back)
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
    if style == "gemma4":  # Gemma4RMSNorm: pow(mean_squared, -0.5) keeps its input and output; weight.float() a copy
        return FP32_BYTES * tokens * h + 2 * stats + FP32_BYTES * tokens * h + (FP32_BYTES * h if upcast else 0)
    if style == "olmo2":  # Olmo2RMSNorm, GptOssRMSNorm: weight * normed in fp32, cast after; the fp32 normed is saved
        return FP32_BYTES * tokens * h + stats + FP32_BYTES * tokens * h
    if style == "t5":
        return upcast + e * tokens * h + stats + e * tokens * h
    if style == "cohere":  # CohereLayerNorm (modeling_cohere.py): in fp32, x - mean computed twice (pow's input and
        # the normalisation's), the normalised x (weight's multiply), rsqrt; in 16 bits the weight's fp32 cast too
        return COHERE_NORM_TENSORS * FP32_BYTES * tokens * h + stats + (FP32_BYTES * h if e < FP32_BYTES else 0)
    return e * tokens * h + LAYERNORM_STATS * stats


def dropout_mask_bytes(traits: Traits, site: str, elements: int) -> int:
    return MASK_BYTES * elements if site in traits.dropout_sites else 0


MASK_KINDS_WITH_SLIDING = 2  # Gemma 2 alternates full and sliding-window layers: two dense masks


def two_mask_kinds(arch: Architecture) -> bool:
    """Gemma 2 alternates full and sliding layers; the 2025-26 families say so in layer_types (Gemma 3, gpt-oss)."""
    if len(set(arch.attention_types)) > 1:
        return True
    return arch.sliding_window is not None and arch.family in GEMMA_FAMILIES and arch.num_layers > 1
