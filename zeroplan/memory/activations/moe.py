"""Routed-expert layers as the 2025-26 families write them: routers, shared experts, dense-then-MoE stacks.

Pure: no I/O. Each count is what PyTorch autograd saves in the named transformers 5.x module, checked against
validation/activations_new_families.json (validation/measure_new_families.py). Symbols as in
zeroplan.memory.activations; S = T k routed token-expert pairs.

Routing. The experts (transformers integrations/moe.py grouped_mm_experts_forward) gather, sort and multiply
the S pairs; whatever the routing, the pairs number T k, so every saved tensor depends on the routing only
through that sum: the mean (T k / E tokens per expert) is exact for a GPU that holds all experts, and the
measured cases, with their real and uneven routing (recorded per layer), agree to the byte. Imbalance would
matter only where experts are split across GPUs (expert parallelism), which zeroplan does not model.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.memory.activations.gemma4 import GEMMA4_FAMILIES, gemma4_variant
from zeroplan.memory.activations.ops import FP32_BYTES, INDEX_BYTES, MASK_BYTES
from zeroplan.models.architecture import Architecture

# Router styles, by the module that routes (transformers 5.x modeling_<family>.py):
#   softmax:       MixtralTopKRouter, Qwen2MoeTopKRouter, Qwen3MoeTopKRouter: softmax in fp32 over E, top-k,
#                  optional renormalisation (norm_topk_prob); Qwen's cast the weights back to the compute dtype
#   sigmoid_group: DeepseekV3TopkRouter / Glm4MoeTopkRouter + route_tokens_to_experts: F.linear on fp32 copies of
#                  input and weight, sigmoid, group-limited top-k (top-2 sum per group, topk_group groups), mask
#   topk_softmax:  GptOssTopKRouter: top-k of the logits, softmax over the k values in the compute dtype
SIGMOID_GROUP_ROUTERS = frozenset({"deepseek_v3", "deepseek_v32", "glm4_moe", "kimi_k2"})
TOPK_SOFTMAX_ROUTERS = frozenset({"gpt_oss"})
# Ernie4_5_MoeTopKRouter: the softmax router over F.linear(hidden.float(), weight.float()), autocast off
FP32_COPY_SOFTMAX_ROUTERS = frozenset({"ernie4_5_moe"})
WEIGHTS_IN_COMPUTE_DTYPE = frozenset({"qwen2_moe", "qwen3_moe", "qwen3_next", "ernie4_5_moe"})  # router_top_value.to(dtype)
CLAMPED_SWIGLU_FAMILIES = frozenset({"gpt_oss"})  # GptOssExperts: clamp, gate * sigmoid(alpha gate), (up + 1) * glu
CLAMPED_SWIGLU_SAVED = 5  # T f tensors: clamped gate, sigmoid, up + 1, glu, down input
DENSE_EXPERT_FAMILIES = frozenset({"llama4_text"})  # Llama4TextMoe: bmm of every expert over every token
GROUP_SCORES = 2  # DeepSeek-V3 / GLM: a group's score is the sum of its top-2 expert scores


def router_terms(arch: Architecture, tokens: int, e: int, *, norm_topk: bool) -> list[tuple[str, int]]:
    """What one router saves; the expert weights it hands on are counted with the experts (routing_weight_bytes).

    Group-limited routing (router_groups, router_topk_groups: DeepSeek-V3's n_group 8, topk_group 4) keeps index
    tensors of 8 T (2 n_group + topk_group) bytes.
    """
    groups, topk_groups = arch.router_groups, arch.router_topk_groups
    t, n, k, h = tokens, arch.num_experts, arch.num_experts_per_tok, arch.hidden_size
    renorm = FP32_BYTES * t + FP32_BYTES * t * k if norm_topk else 0  # the sum and the quotient
    if arch.family in SIGMOID_GROUP_ROUTERS:
        copies = FP32_BYTES * (t * h + n * h) if e < FP32_BYTES else 0
        return [
            ("router fp32 input and weight copies", copies),
            ("router sigmoid scores", FP32_BYTES * t * n),
            ("group top-k indices", INDEX_BYTES * t * (GROUP_SCORES * groups + topk_groups)),
            ("group mask", MASK_BYTES * t * n),
            ("top-k indices", INDEX_BYTES * t * k),
            ("top-k renormalisation", renorm),
        ]
    if arch.family in TOPK_SOFTMAX_ROUTERS:
        return [("top-k indices", INDEX_BYTES * t * k), ("softmax over the top-k logits", e * t * k)]
    copies = FP32_BYTES * (t * h + n * h) if e < FP32_BYTES and arch.family in FP32_COPY_SOFTMAX_ROUTERS else 0
    return [("router fp32 input and weight copies", copies), ("router softmax", FP32_BYTES * t * n),
            ("top-k indices", INDEX_BYTES * t * k), ("top-k renormalisation", renorm)]


def routing_weight_bytes(arch: Architecture, e: int) -> int:
    """Bytes per routed pair of the weights the experts multiply by (sorted with the pairs)."""
    if arch.family in WEIGHTS_IN_COMPUTE_DTYPE or arch.family in TOPK_SOFTMAX_ROUTERS:
        return e
    return FP32_BYTES


def norm_topk(arch: Architecture) -> bool:
    return arch.router_norm_topk


def _layer_key(arch: Architecture, i: int, nope: set[int]) -> tuple[str, str, bool, bool]:
    mlp = arch.mlp_types[i] if arch.mlp_types else ("moe" if arch.is_moe else "dense")
    return mlp, arch.attention_type(i), i in nope, i >= arch.num_layers - arch.kv_shared_layers


def _uniform(arch: Architecture) -> bool:
    return not (arch.mlp_types or arch.attention_types or arch.no_rope_layers or arch.kv_shared_layers)


def layer_variants(arch: Architecture) -> list[tuple[Architecture, int]]:
    """The distinct layers of the stack and how many of each, each as a one-layer-kind Architecture.

    An MoE model's dense layers (first_k_dense_replace, mlp_only_layers, Llama 4's interleave) are its dense MLP
    at dense_intermediate_size; a layer's attention type (attention_types[0]) and rope (no_rope_layers == (0,)
    for a NoPE layer) are kept where they change what is saved (Llama 4's chunked and NoPE layers); Gemma 4's global
    layers take their own head width and kv heads, its kv-sharing layers say so (gemma4.gemma4_variant).
    """
    if _uniform(arch):
        return [(arch, arch.num_layers)]
    nope = set(arch.no_rope_layers)
    counts: dict[tuple[str, str, bool, bool], int] = {}
    for i in range(arch.num_layers):
        key = _layer_key(arch, i, nope)
        counts[key] = counts.get(key, 0) + 1
    return [(_variant(arch, *key), n) for key, n in counts.items()]


def _variant(arch: Architecture, mlp: str, attention: str, nope: bool, shared: bool) -> Architecture:
    layer = replace(arch, mlp_types=(), attention_types=(attention,), no_rope_layers=(0,) if nope else ())
    if arch.family in GEMMA4_FAMILIES:
        return gemma4_variant(layer, shared)
    if mlp == "dense" and arch.is_moe:
        return replace(layer, num_experts=0, num_experts_per_tok=0, shared_expert_intermediate_size=0,
                       intermediate_size=arch.dense_intermediate_size or arch.intermediate_size)
    return layer


def layer_kinds(arch: Architecture) -> list[Architecture]:
    """Each decoder layer's kind, in layer order (one object per distinct kind, as layer_variants makes them)."""
    if _uniform(arch):
        return [arch] * arch.num_layers
    nope = set(arch.no_rope_layers)
    made: dict[tuple[str, str, bool, bool], Architecture] = {}
    kinds = []
    for i in range(arch.num_layers):
        key = _layer_key(arch, i, nope)
        if key not in made:
            made[key] = _variant(arch, *key)
        kinds.append(made[key])
    return kinds


def moe_assumptions(arch: Architecture, tokens: int) -> list[str]:
    """What the output says about routing (tokens = b s per micro-batch)."""
    n, k = arch.num_experts, arch.num_experts_per_tok
    layers = f"{arch.num_moe_layers} of {arch.num_layers} layers MoE" if arch.num_dense_layers else "every layer MoE"
    shared = (f", a shared expert {arch.shared_expert_intermediate_size} wide on every token"
              if arch.shared_expert_intermediate_size else "")
    if arch.family in DENSE_EXPERT_FAMILIES:
        return [f"MoE ({layers}): transformers' Llama4TextMoe runs all {n} experts on every token (E b s rows, "
                f"whatever the routing){shared}"]
    return [f"MoE ({layers}): grouped_mm experts over b s k = {tokens * k} routed pairs, a mean of b s k / E = "
            f"{tokens * k / n:g} tokens per expert; the saved bytes depend on the routing only through b s k, so "
            f"uneven routing changes nothing on a GPU holding all experts (no expert parallelism modelled){shared}"]
