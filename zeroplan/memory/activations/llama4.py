"""Llama 4 (llama4_text): chunked attention without FlashAttention, L2 qk-norms, NoPE temperature, dense experts.

Pure: no I/O. transformers 5.x modeling_llama4.py, checked against validation/activations_new_families.json.

  rotary     Llama4TextRotaryEmbedding keeps one complex64 table, s x d/2 x 8 B = 4 s d, whatever the dtype
  rope layer Llama4TextL2Norm on q and k after rotary when use_qk_norm (Architecture.qk_norm not "none"): fp32
             input and rsqrt, no weight
             (4 T a d + 4 T a; 4 T g d + 4 T g)
  NoPE layer attn_temperature_tuning scales q by a (1, s, 1, 1) fp32 tensor: 4 s
  chunked    Llama4PreTrainedModel has no FlashAttention path (_supports_flash_attn = False): "flash" is SDPA, and a
             chunked layer hands it a dense b x 1 x s x s mask in e, kept once for all chunked layers (checkpointed
             layers hold the boolean mask it is made from, b s s bytes, instead), and k, v
             repeated to a heads (repeat_kv: SDPA takes no enable_gqa with a mask); full layers run causal, no mask
  MoE layer  Llama4TextMoe runs every expert on every token (E T rows, whatever the routing): router top-k
             indices 8 T k and fp32 sigmoid scores 4 T E; the repeated input and its product with the scores
             (2 e E T h) and the scores e E T; experts' gate_up e E T 2f, activation output e E T f and down input
             e E T f; the shared expert a dense gated MLP of intermediate_size on the same input
"""

from __future__ import annotations

from zeroplan.memory.activations.ops import FP32_BYTES, INDEX_BYTES, MASK_BYTES
from zeroplan.models.architecture import Architecture

LLAMA4_FAMILIES = frozenset({"llama4_text"})
COMPLEX64_BYTES = 8
DENSE_EXPERT_SAVED = 4  # E T f tensors: gate_up (2), activation output, down input


def rotary_table_bytes(arch: Architecture, s: int) -> int:
    return COMPLEX64_BYTES * s * (arch.head_dim // 2)


def is_nope(layer: Architecture) -> bool:
    return layer.no_rope_layers == (0,)


def attention_extra_terms(layer: Architecture, b: int, s: int, e: int, *, flash: bool) -> list[tuple[str, int]]:
    """What a Llama 4 layer's attention saves beyond the Llama one: qk L2 norms or the NoPE temperature, and
    under SDPA the a-head k and v of a chunked layer (the mask is counted once, chunk_mask_bytes)."""
    t, a, g, d = b * s, layer.num_attention_heads, layer.num_key_value_heads, layer.head_dim
    if is_nope(layer):
        terms = [("NoPE attention temperature (fp32, 1 x s)", FP32_BYTES * s)]
    elif layer.qk_norm != "none":  # use_qk_norm (Scout: true; Maverick: false)
        terms = [("q L2 norm", FP32_BYTES * t * a * (d + 1)), ("k L2 norm", FP32_BYTES * t * g * (d + 1))]
    else:
        terms = []
    if flash and layer.attention_type(0) == "chunked_attention":
        terms.append(("k, v repeated to a heads (SDPA with a mask)", 2 * e * t * (a - g) * d))
    return terms


def chunk_mask_bytes(arch: Architecture, b: int, s: int, e: int, *, flash: bool, full: bool) -> int:
    """Llama 4 under SDPA: SDPA saves the chunked layers' mask in e; a checkpointed layer is handed (and holds)
    the boolean mask it is made from, 1 B per element."""
    if not flash or arch.family not in LLAMA4_FAMILIES or "chunked_attention" not in arch.attention_types:
        return 0
    return (MASK_BYTES if full else e) * b * s * s


def dense_experts_terms(arch: Architecture, tokens: int, e: int) -> list[tuple[str, int]]:
    n, k, h, f = arch.num_experts, arch.num_experts_per_tok, arch.hidden_size, arch.intermediate_size
    return [
        ("router top-k indices and sigmoid scores", INDEX_BYTES * tokens * k + FP32_BYTES * tokens * n),
        ("input repeated per expert and scaled by its score", 2 * e * n * tokens * h + e * n * tokens),
        ("experts gate/up, activation output and down input (every token)", DENSE_EXPERT_SAVED * e * n * tokens * f),
    ]
