"""DeepSeek-V4's decoder layer as autograd keeps it (transformers==5.25.0:models/deepseek_v4/modeling_deepseek_v4.py).

Pure: no I/O. Symbols as in zeroplan.memory.activations (T = b s, e compute bytes, h hidden, a heads, d head_dim),
and N hc_mult streams, I hc_sinkhorn_iters, r q_lora_rank, r_d the rotary slice, g o_groups, o o_lora_rank, E
experts, k per token, f their width; a compressed layer of rate m has W = floor(s / m) windows and attends over
L = s + W keys (L = s in a sliding layer). Each term is checked against validation/activations_deepseek_v4.json
(validation/measure_deepseek_v4.py: what is still saved when the forward has returned). Every parameter is in the
compute dtype, as for every family (DeepSpeed's module.bfloat16(), FSDP's param_dtype): the modules transformers keeps
in fp32 when it loads the model (_keep_in_fp32_modules_strict) are cast too, and compute in fp32 only where their
code upcasts (.float(), .to(torch.float32), softmax(dtype=torch.float32)). A run that keeps them fp32 (no engine
cast: one GPU, plain DDP) keeps the core's softmax in fp32 and its cast: docs/activations.md says by how much.

- DeepseekV4HyperConnection (attn_hc, ffn_hc): the N streams (e T N h), their fp32 copy, an unweighted RMSNorm
  (rsqrt, normed), fn.float() (a copy of the mix weight in 16 bits), the mix projection's output (T (2 + N) N),
  the pre and post sigmoids, the comb softmax, then 2 I - 1 Sinkhorn divisions, each keeping its numerator (T N N)
  and denominator (T N), and pre for the collapse;
  around each block the layer keeps the block's output, post and comb in e (their residual mix).
- DeepseekV4RMSNorm (weight * normed in fp32): the fp32 input, rsqrt, the fp32 normed product (ops.norm_bytes
  "olmo2"); its e output where a linear reads it. q_b_norm (no weight) on the e query: the query, its fp32 copy, rsqrt in fp32
  and in e.
- apply_rotary_pos_emb repeats cos and sin (1 x s x r_d, e) on every call: q, kv and the output (-sin) make six
  tables per layer; a compressor's keys two more of b x W x r_d.
- compressors: the softmax over the window (fp32) and its e cast, the kv it weighs (HCA: kv_proj's whole output;
  CSA: the 2m-slot overlap layout), kv_norm over b W rows, the rotary tables. The lightning indexer (CSA) ends in
  a top-k whose integer indices only mask the attention: nothing reaches back into it, so what it saved is freed
  with its graph before the forward returns (its parameters get no gradient in transformers' training).
- the core (eager only: _supports_sdpa / _supports_flash_attn False): q, the one k = v head (b = 1: as it is;
  b > 1: matmul's broadcast copies of a heads, for k^T and for v), the max's indices, the softmax over L + 1 logits
  (the sink's) in e, which p v reads as it is; the grouped output's inputs (o_a_proj: T a d, o_b_proj: T g o).
- MoE: the score function (sqrtsoftplus: 2 tensors, sigmoid: 1), the indices (hash: tid2eid[input_ids]) and the
  renormalised weights; grouped_mm experts with DeepseekV4Experts._apply_gate's clamps (the clamped gate and up
  are new tensors) and the same clamped SwiGLU in the shared expert.
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.ops import EXPERT_INDEX_TENSORS, FP32_BYTES, INDEX_BYTES, OFFSET_BYTES, norm_bytes
from zeroplan.memory.activations.traits import ACTIVATION_SAVES, Traits, activation_saves
from zeroplan.models.architecture import Architecture

DEEPSEEK_V4_FAMILIES = frozenset({"deepseek_v4"})
CSA, HCA = "compressed_sparse_attention", "heavily_compressed_attention"
NORM = "olmo2"  # DeepseekV4RMSNorm: weight * normed in fp32, cast after (ops.norm_bytes)
HC_GATES = 2  # pre and post: sigmoid(...) each keeps its output
ROTARY_CALLS = 3  # apply_rotary_pos_emb on q, on kv and on the attention output, each with fresh cos and sin
ROTARY_TABLES = 2  # cos and sin
CSA_SLOTS = 2  # a CSA window weighs 2m slots: the previous window's Ca half and its own Cb half
K_AND_V = 2  # b > 1: matmul's broadcast copies of the shared k=v head, one for q k^T, one for p v
ASSUMPTION = ("deepseek_v4 (transformers==5.25.0 modeling_deepseek_v4.py): each layer keeps its hc_mult input streams "
              "(e) and, per hyper-connection, an fp32 copy, norm and Sinkhorn mixing; the core's softmax over "
              "s + W + 1 logits (W compressed keys, the sink); the lightning indexer keeps nothing for backward (its "
              "top-k indices only mask the attention; its parameters get no gradient); every parameter in the compute "
              "dtype, the engine's cast included (kept fp32 as transformers loads them, the softmax is fp32: more)")


def check_deepseek_v4(arch: Architecture) -> None:
    """ZeroplanError for what the formula does not cover."""
    if arch.attention_dropout > 0:
        raise ZeroplanError(f"deepseek_v4 attention_dropout {arch.attention_dropout}: the dropout mask on the core's "
                            "probabilities is not measured for it (its published configs have 0.0); not modelled")
    if arch.router_score not in ACTIVATION_SAVES:
        raise ZeroplanError(f"deepseek_v4 scoring_func {arch.router_score!r}: transformers==5.25.0's router calls "
                            f"ACT2FN[scoring_func], which has no such function; not modelled")


def _half(e: int) -> bool:
    return e < FP32_BYTES


def compress_rate(arch: Architecture) -> int:
    """The KV compression rate of a one-kind layer (moe.layer_variants): 0 for a sliding layer."""
    kind = arch.attention_type(0)
    return arch.csa_compress_rate if kind == CSA else arch.hca_compress_rate if kind == HCA else 0


def windows(arch: Architecture, s: int) -> int:
    rate = compress_rate(arch)
    return s // rate if rate else 0


def residual_bytes(arch: Architecture, b: int, s: int, e: int) -> int:
    """A layer's input: the N streams (e T N h), what a checkpointed layer keeps."""
    return e * b * s * max(1, arch.hc_mult) * arch.hidden_size


def hyper_connection_terms(arch: Architecture, t: int, e: int, which: str) -> list[tuple[str, int]]:
    n, h, iters = arch.hc_mult, arch.hidden_size, arch.hc_sinkhorn_iters
    f = FP32_BYTES
    return [(f"{which} streams (T N h)", e * t * n * h),
            (f"{which} streams' fp32 copy", f * t * n * h if _half(e) else 0),
            (f"{which} norm rsqrt and normed streams", f * t + f * t * n * h),
            (f"{which} mix weight's fp32 copy (fn.float())", f * (2 + n) * n * n * h if _half(e) else 0),
            (f"{which} mix projection output (T (2 + N) N)", f * t * (2 + n) * n),
            (f"{which} pre and post sigmoids, comb softmax", HC_GATES * f * t * n + f * t * n * n),
            (f"{which} Sinkhorn divisions ({2 * iters - 1}: numerator and denominator)",
             (2 * iters - 1) * f * t * (n * n + n)),
            (f"{which} pre (collapse)", f * t * n),
            (f"{which} block output, post and comb in e (residual mix)", e * t * h + e * t * n + e * t * n * n)]


def _normed(rows: int, width: int, e: int) -> int:
    """A DeepseekV4RMSNorm whose e output a linear keeps."""
    return norm_bytes(NORM, rows, width, e) + e * rows * width


def _compressor_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    w, rate, d, f = windows(arch, s), compress_rate(arch), arch.head_dim, FP32_BYTES
    if not w:
        return []
    csa = arch.attention_type(0) == CSA
    slots = b * w * rate * (CSA_SLOTS if csa else 1)
    kv = e * slots * d if csa else e * b * s * d  # CSA: the overlap layout; HCA: kv_proj's output, views of it
    return [("compressor window softmax (fp32) and its e cast", f * slots * d + (e * slots * d if _half(e) else 0)),
            ("compressor kv it weighs", kv), ("compressor kv_norm", norm_bytes(NORM, b * w, d, e)),
            ("compressed keys' rotary cos and sin (b W r_d)", ROTARY_TABLES * e * b * w * arch.qk_rope_head_dim)]


def core_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """eager_attention_forward with sinks over L = s + W keys; its inputs q and kv first."""
    a, d, keys = arch.num_attention_heads, arch.head_dim, s + windows(arch, s)
    kv = e * b * keys * d
    copies = 0 if b == 1 else K_AND_V * e * b * a * keys * d
    return [("q (core input)", e * b * s * a * d), ("k = v (core input, one head)", 0 if copies else kv),
            ("k and v broadcast to a heads (matmul copies, b > 1)", copies),
            ("max indices", INDEX_BYTES * b * a * s),
            ("softmax over L + 1 logits (the sink's)", e * b * a * s * (keys + 1))]


def core_mask_bytes(arch: Architecture, b: int, s: int, e: int) -> int:
    """A compressed layer's own mask (the causal mask with its block bias concatenated, b x 1 x s x L)."""
    w = windows(arch, s)
    return e * b * s * (s + w) if w else 0


def attention_terms(arch: Architecture, b: int, s: int, e: int, *, selective: bool) -> list[tuple[str, int]]:
    t, h, a, d, r = b * s, arch.hidden_size, arch.num_attention_heads, arch.head_dim, arch.q_lora_rank
    tables = ROTARY_CALLS * ROTARY_TABLES * e * s * arch.qk_rope_head_dim
    q_b_norm = e * t * a * d + FP32_BYTES * t * a + ((FP32_BYTES * t * a * d + e * t * a) if _half(e) else 0)
    terms = [("attention norm (and its e output)", _normed(t, h, e)), ("q_a_norm (and q_residual)", _normed(t, r, e)),
             ("q_b_norm (no weight)", q_b_norm), ("kv_norm", norm_bytes(NORM, t, d, e)),
             ("rotary cos and sin (q, kv, output: 1 x s x r_d each)", tables)]
    terms += _compressor_terms(arch, b, s, e)
    core = core_terms(arch, b, s, e)
    if selective:  # the checkpointed core keeps its inputs (q, the one k = v head) and a compressed layer's mask
        keys = s + windows(arch, s)
        core = [core[0], ("k = v (core input, one head)", e * b * keys * arch.head_dim),
                ("core mask (compressed layer's own)", core_mask_bytes(arch, b, s, e))]
    terms += core
    return terms + [("o_a_proj input (T a d)", e * t * a * d),
                    ("o_b_proj input (T g o)", e * t * arch.o_groups * arch.o_lora_rank)]


def moe_terms(arch: Architecture, traits: Traits, t: int, e: int) -> list[tuple[str, int]]:
    h, f, k, n = arch.hidden_size, arch.intermediate_size, arch.num_experts_per_tok, arch.num_experts
    routed = t * k
    saves = activation_saves(traits)
    act = saves.tensors * e + saves.mask_bytes
    swiglu = (act + 2 * e) - (e if saves.saves_output else 0)  # act's saves, its output and the clamped up
    score = ACTIVATION_SAVES[arch.router_score].tensors
    return [("MLP norm (and its e output)", _normed(t, h, e)),
            (f"router scores ({arch.router_score})", score * e * t * n),
            ("top-k (or hash) indices, weights and their sum", INDEX_BYTES * routed + e * routed + e * t),
            ("expert routing indices and offsets", EXPERT_INDEX_TENSORS * INDEX_BYTES * routed + OFFSET_BYTES * n),
            ("tokens gathered per expert", e * routed * h), ("expert gate/up outputs", 2 * e * routed * f),
            ("expert clamped SwiGLU (act, clamped up, down input)", (swiglu + e) * routed * f),
            ("expert outputs and routing weights", e * routed * h + e * routed),
            ("shared expert gate and up outputs", 2 * e * t * f),
            ("shared expert clamped SwiGLU (act, clamped up, down input)", (swiglu + e) * t * f)]


def layer_terms(arch: Architecture, traits: Traits, b: int, s: int, e: int, *,
                selective: bool) -> list[tuple[str, int]]:
    """One DeepSeek-V4 decoder layer of one kind (moe.layer_variants: attention_types[0] its own)."""
    check_deepseek_v4(arch)
    t = b * s
    terms = hyper_connection_terms(arch, t, e, "attn_hc") + attention_terms(arch, b, s, e, selective=selective)
    terms += hyper_connection_terms(arch, t, e, "ffn_hc") + moe_terms(arch, traits, t, e)
    return [(n, v) for n, v in terms if v]


def core_recompute(kinds: list[Architecture], b: int, s: int, e: int) -> int:
    """Selective checkpointing: the largest core's saved tensors beyond its inputs."""
    return max(sum(v for _, v in core_terms(k, b, s, e)[2:]) for k in kinds)


def held_bytes(arch: Architecture, b: int, s: int, e: int, *, full: bool) -> int:
    """What checkpointed layers re-read, kept once: the causal mask (b x 1 x s x s, e) where a sliding layer's core
    or a layer takes it; under full checkpointing also the main and compress rotary tables (4 of 1 x s x r_d / 2)
    and the position ids."""
    sliding = any(k not in (CSA, HCA) for k in arch.attention_types) or not arch.attention_types
    mask = e * b * s * s if full or sliding else 0
    if not full:
        return mask
    return mask + ROTARY_TABLES * e * s * arch.qk_rope_head_dim + INDEX_BYTES * s


def head_terms(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """DeepseekV4HyperHead (the last streams, their fp32 copy, norm, mixes, sigmoid, pre) and the final norm."""
    t, n, h, f = b * s, arch.hc_mult, arch.hidden_size, FP32_BYTES
    return [("hc_head streams (T N h) and fp32 copy", e * t * n * h + (f * t * n * h if _half(e) else 0)),
            ("hc_head norm rsqrt and normed streams", f * t + f * t * n * h),
            ("hc_head mixes, sigmoid and pre", 3 * f * t * n),
            ("hc_head hc_fn and hc_scale fp32 copies", f * n * n * h + f if _half(e) else 0),
            ("final norm", norm_bytes(NORM, t, h, e)),
            ("LM head input", e * t * h)]


__all__ = ["ASSUMPTION", "DEEPSEEK_V4_FAMILIES", "check_deepseek_v4", "core_recompute", "head_terms", "held_bytes",
           "layer_terms",
           "residual_bytes"]
