"""Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): what DeepseekV3Attention saves for backward.

Pure: no I/O. transformers 5.x modeling_deepseek_v3.py, checked against validation/activations_new_families.json.
Symbols as in zeroplan.memory.activations, and r_q = q_lora_rank, r_kv = kv_lora_rank, d_n = qk_nope_head_dim,
d_r = qk_rope_head_dim, d_qk = d_n + d_r, d_v = v_head_dim.

  latents  q_a_layernorm over r_q and q_b_proj's input e T r_q (when r_q > 0; else q_proj reads the layer input);
           kv_a_layernorm over r_kv (in fp32 its saved input is kv_a_proj_with_mqa's whole output: + e T d_r) and
           kv_b_proj's input e T r_kv
  flash    q e T a d_qk (torch.cat of the nope and rotary parts), k e T a d_qk (expand_kv's new tensor);
           v: a view of kv_b_proj's output, which stays whole, e T a (d_n + d_v), when d_v = d_qk; otherwise
           FlashAttention-2 gets v padded to d_qk (DeepseekV3Attention pads it for flash_attention_2), e T a d_qk,
           and its output is d_qk wide; output e T a d_v (d_qk when padded), log-sum-exp 4 b a s; the output
           projection reads a contiguous copy, e T a d_v
  selective (eager) q, k, v as the core receives them, v being kv_b_proj's whole output, and its output e T a d_v;
           the recompute makes the scores and (b > 1) the v copy again
  eager    q, k as above; v copied for the batched matmul, e T a d_v (b = 1: no copy, the view keeps
           kv_b_proj's output, e T a (d_n + d_v)); softmax 4 b a s^2 (+ e b a s^2, the cast
           in 16-bit); the output projection's input e T a d_v
"""

from __future__ import annotations

from zeroplan.memory.activations.ops import FP32_BYTES, norm_bytes
from zeroplan.memory.activations.traits import Traits
from zeroplan.models.architecture import Architecture


def latent_terms(arch: Architecture, traits: Traits, tokens: int, e: int) -> list[tuple[str, int]]:
    terms = []
    if arch.q_lora_rank:
        terms += [("q latent norm", norm_bytes(traits.norm, tokens, arch.q_lora_rank, e)),
                  ("q up-projection input", e * tokens * arch.q_lora_rank)]
    # In fp32 the norm's .to(float32) is its input itself: a view of kv_a_proj_with_mqa's whole output (r_kv + d_r).
    view = e * tokens * arch.qk_rope_head_dim if e == FP32_BYTES else 0
    terms += [("kv latent norm", norm_bytes(traits.norm, tokens, arch.kv_lora_rank, e) + view),
              ("kv up-projection input", e * tokens * arch.kv_lora_rank)]
    return terms


def mla_core_terms(arch: Architecture, b: int, s: int, e: int, *, flash: bool,
                   selective: bool = False) -> list[tuple[str, int]]:
    t, a = b * s, arch.num_attention_heads
    d_qk, d_v = arch.qk_nope_head_dim + arch.qk_rope_head_dim, arch.v_head_dim
    qk = [("q (nope and rotary parts)", e * t * a * d_qk), ("k (expanded from the latent)", e * t * a * d_qk)]
    if selective and not flash:  # the core's inputs (v a view of kv_b_proj's output) and its contiguous output
        return qk + [("v (kv up-projection output)", e * t * a * (arch.qk_nope_head_dim + d_v)),
                     ("output (the output projection's input)", e * t * a * d_v)]
    if flash:
        padded = d_v != d_qk
        v = e * t * a * (d_qk if padded else arch.qk_nope_head_dim + d_v)
        out = e * t * a * (d_qk if padded else d_v)
        return qk + [("v", v), ("output", out), ("log-sum-exp", FP32_BYTES * b * a * s),
                     ("output projection input (contiguous copy)", e * t * a * d_v)]
    scores = b * a * s * s
    # With b = 1 the batched matmul folds the view without a copy, which keeps kv_b_proj's whole output.
    v = e * t * a * (arch.qk_nope_head_dim + d_v if b == 1 else d_v)
    terms = qk + [("v (copied for the batched matmul when b > 1)", v), ("softmax output", FP32_BYTES * scores)]
    if e < FP32_BYTES:
        terms.append(("probabilities cast to e", e * scores))
    return terms + [("output projection input", e * t * a * d_v)]


def mla_core_recompute_bytes(arch: Architecture, b: int, s: int, e: int, *, flash: bool) -> int:
    """Selective checkpointing, eager: recomputing one core makes its scores again and, with b > 1, the v copy."""
    if flash:  # selective with flash is counted as none (nothing s x s to recompute)
        return 0
    t, a = b * s, arch.num_attention_heads
    scores = (FP32_BYTES + (e if e < FP32_BYTES else 0)) * b * a * s * s
    return scores + (e * t * a * arch.v_head_dim if b > 1 else 0)
