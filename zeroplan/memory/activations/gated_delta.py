"""Qwen3-Next's and Qwen3.5's layers: the gated delta net (linear attention) and the gated full attention.

Pure: no I/O. Counts are what PyTorch autograd saves in transformers==5.25.0's torch path,
models/qwen3_5/modeling_qwen3_5.py (Qwen3-Next's modeling_qwen3_next.py is the same code):
Qwen3_5GatedDeltaNet.forward, causal_conv1d_fn, l2norm, torch_chunk_gated_delta_rule and
Qwen3_5RMSNormGated. That path is what runs where flash-linear-attention (fla) and causal-conv1d are not
installed, and what the CPU measures (validation/measure_new_families.py; docs/activations.md). With fla
on a GPU, chunk_gated_delta_rule is one autograd Function (fla-org/flash-linear-attention@0315a70ea553:
fla/ops/gated_delta_rule/chunk.py ChunkGatedDeltaRuleFunction) that saves only q, k (l2-normed) and their
rstd, v, the cumulated g, beta and A, one c x c matrix per chunk in the compute dtype, and recomputes the rest
in backward; the torch path keeps five c x c matrices per chunk in fp32 and more. zeroplan counts the torch
path (said in the output): an upper bound where fla runs.

Symbols: b, s, T = b s, e as in zeroplan.memory.activations; Hk, Hv the key and value heads, dk, dv their
widths, K = Hk dk, V = Hv dv, C = 2 K + V the conv channels, W the conv kernel; c the chunk (64), s_p = s
padded to a multiple of c, N = s_p / c chunks, P = b s_p padded tokens.
"""

from __future__ import annotations

from zeroplan.memory.activations.ops import FP32_BYTES, MASK_BYTES
from zeroplan.models.architecture import Architecture

LINEAR_ATTENTION = "linear_attention"
# torch_chunk_gated_delta_rule(chunk_size=64): the call in Qwen3_5GatedDeltaNet.forward passes none
CHUNK = 64
QK = 2  # query and key each go through l2norm and are kept in fp32 at Hv heads (repeat_interleave)
G_TENSORS = 2  # g = -exp(A_log) * softplus(a + dt_bias): softplus's input and output (T Hv, fp32)
G_VECTORS = 2  # and exp(A_log), -exp(A_log) (Hv each, fp32)
# The chunk matrices (P Hv c, fp32): exp(pairwise decay), k_beta k^T, q k^T, the UT system solve_triangular
# keeps, and intra_chunk_attn that the scan's matmul keeps
CHUNK_MATRICES = 5
# Padded per-head vectors (P Hv, fp32): beta, exp(cum_decay) twice (decayed k_beta, decayed query), the key
# decay exp(cum_decay[-1] - cum_decay)
PADDED_VECTORS = 4
# Padded key-width tensors (P Hv dk, fp32): key, k_beta, scaled query, k_cumdecay, decayed key
PADDED_KEY_TENSORS = 5
# Padded value-width tensors (P Hv dv, fp32): value, new_values, v_new (one per chunk, c rows each)
PADDED_VALUE_TENSORS = 3
# Measured (validation/measure_delta_net.py): an fp32 model with b > 1 and s a multiple of c (no padding, so the
# fp32 q, k are the .to() outputs themselves) keeps four more P Hv dk copies, at torch_chunk_gated_delta_rule's
# ut_system, intra_chunk_attn, decayed_k_beta and decayed-query lines; padded or in 16 bits it does not
FP32_UNPADDED_COPIES = 4
# Qwen3_5RMSNormGated: its fp32 input, the gate's fp32 copy and silu's output (T V each, fp32)
GATED_NORM_FP32_TENSORS = 3


def is_linear_layer(arch: Architecture) -> bool:
    """A one-layer-kind Architecture (activations.moe.layer_variants) whose mixer is the gated delta net."""
    return arch.attention_types == (LINEAR_ATTENTION,)


def _chunks(s: int) -> int:
    return -(-s // CHUNK)


def projection_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """in_proj_qkv's output (the conv's input), the causal conv's padded output (silu's input: s + W - 1
    positions, causal_conv1d_fn slices after), beta = sigmoid(b), and g's softplus and exp."""
    t, hv = b * s, arch.linear_num_value_heads
    channels = 2 * arch.linear_num_key_heads * arch.linear_key_head_dim + hv * arch.linear_value_head_dim
    return [
        ("delta net conv input (in_proj_qkv output)", e * t * channels),
        ("delta net conv output (silu input, padded)", e * b * channels * (s + arch.linear_conv_kernel_dim - 1)),
        ("delta net beta (sigmoid output)", e * t * hv),
        ("delta net decay g (softplus input, output; exp(A_log))", FP32_BYTES * (G_TENSORS * t * hv + G_VECTORS * hv)),
    ]


def chunk_rule_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """torch_chunk_gated_delta_rule: l2norm of q and k, the padded fp32 tensors, the chunk matrices and the
    scan over N chunks (one state b Hv dk dv per chunk; the decayed query kept only when N > 1)."""
    hv, dk, dv = arch.linear_num_value_heads, arch.linear_key_head_dim, arch.linear_value_head_dim
    t, n = b * s, _chunks(s)
    p = b * n * CHUNK
    decayed_query = FP32_BYTES * p * hv * dk if n > 1 else 0
    unpadded = e == FP32_BYTES and b > 1 and s % CHUNK == 0
    key_copies = FP32_UNPADDED_COPIES * FP32_BYTES * p * hv * dk if unpadded else 0
    return [
        ("delta net q, k l2norm (input, rsqrt)", QK * FP32_BYTES * (t * hv * dk + t * hv)),
        ("delta net chunk matrices (c x c per chunk)", CHUNK_MATRICES * FP32_BYTES * p * hv * CHUNK),
        ("delta net padded key-width tensors", PADDED_KEY_TENSORS * FP32_BYTES * p * hv * dk + decayed_query
         + key_copies),
        ("delta net padded value-width tensors", PADDED_VALUE_TENSORS * FP32_BYTES * p * hv * dv),
        ("delta net padded beta and decays", PADDED_VECTORS * FP32_BYTES * p * hv + FP32_BYTES * b * hv * n),
        ("delta net causal chunk mask", MASK_BYTES * CHUNK * CHUNK),
        ("delta net recurrent states (one per chunk)", FP32_BYTES * n * b * hv * dk * dv),
    ]


def gated_norm_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """Qwen3_5RMSNormGated over T Hv rows of dv, then out_proj's input (the product cast back to e)."""
    t, hv = b * s, arch.linear_num_value_heads
    v = hv * arch.linear_value_head_dim
    out_proj = e * t * v
    return [
        ("delta net gated norm (fp32 input, rsqrt, gate, silu)", GATED_NORM_FP32_TENSORS * FP32_BYTES * t * v
         + FP32_BYTES * t * hv),
        ("delta net gated norm products", 2 * e * t * v),
        ("delta net out_proj input", out_proj),
    ]


def delta_net_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """One Qwen3_5GatedDeltaNet (torch path), after the layer's input norm (counted with the layer)."""
    return projection_terms(arch, b, s, e) + chunk_rule_terms(arch, b, s, e) + gated_norm_terms(arch, b, s, e)


def output_gate_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """Qwen3_5Attention: attn_output * sigmoid(gate), gate the second half of q_proj's output: the sigmoid's
    output and the product (o_proj's input) beside the core's output. In fp32 the q norm's x.float() is the q view
    itself, which keeps q_proj's whole output (the gate half too) alive: e T a d more."""
    if not arch.attention_output_gate:
        return []
    gated = e * b * s * arch.num_attention_heads * arch.head_dim
    return [("attention output gate (sigmoid output, gated output)", 2 * gated),
            ("q_proj's gate half, kept by the q norm's view (fp32)", gated if e == FP32_BYTES else 0)]


def delta_net_assumption() -> str:
    return ("gated delta net layers (Qwen3-Next, Qwen3.5): transformers' torch path (torch_chunk_gated_delta_rule, "
            "chunks of 64, fp32 inside; causal_conv1d_fn), as the CPU runs it; with flash-linear-attention on a GPU "
            "the kernel recomputes its chunk matrices and keeps less: this is an upper bound there")
