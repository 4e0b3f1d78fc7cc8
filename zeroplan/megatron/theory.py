"""Megatron-LM's `theoretical_memory_usage.py`, reproduced to the byte (NVIDIA/Megatron-LM@d98e8a6, 2026-08-22).

`compute_weight_and_optimizer_memory`, `compute_activation_memory` (Korthikanti et al. 2022, Table 2, used
with sequence parallelism and selective recompute) and `compute_activation_memory_without_sp` (used
otherwise), and `report_theoretical_memory`'s choice between them. The arithmetic keeps Megatron's float
evaluation order, so the bytes are Megatron's own floats. Pure: no I/O.
Source: https://github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/megatron/training/theoretical_memory_usage.py
Test vectors: tests/data/megatron/vectors.json, made by validation/megatron_reference.py running that file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
BYTES_PER_PARAM = 18  # bf16 param, fp32 main grad, fp32 main param, fp32 Adam m and v (Megatron's comment)
DISTRIBUTED_OPTIMIZER_UNSHARDED = 6  # bf16 param + fp32 grad stay whole; the 12 B of main param, m, v shard over dp
DISTRIBUTED_OPTIMIZER_SHARDED = 12
WITHOUT_SP_OVERHEAD = 1.05  # "buffer for optimizer and miscellaneous temporaries (5% overhead)"


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronArgs:
    """The Megatron-LM arguments the formula reads, named as Megatron names them (megatron/training/arguments.py)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    group_query_attention: bool
    kv_channels: int
    swiglu: bool
    normalization: str  # "RMSNorm" or "LayerNorm"
    padded_vocab_size: int
    untie_embeddings_and_output_weights: bool
    add_bias_linear: bool
    # MoE (num_experts None = dense)
    num_experts: int | None = None
    moe_ffn_hidden_size: int | None = None
    moe_router_topk: int = 2
    moe_layer_freq: int | tuple[int, ...] = 1
    moe_shared_expert_intermediate_size: int | None = None
    moe_shared_expert_gate: bool = False
    moe_latent_size: int | None = None
    mtp_num_layers: int | None = None
    # multi-latent attention
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_head_dim: int = 0
    qk_pos_emb_head_dim: int = 0
    v_head_dim: int = 0
    # parallelism
    world_size: int
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    data_parallel_size: int
    use_distributed_optimizer: bool = False
    sequence_parallel: bool = False
    recompute_granularity: str | None = None  # "selective", "full" or None
    # the batch
    seq_length: int
    micro_batch_size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronEstimate:
    """Megatron's two figures, in bytes (its function returns them in MiB: divide by 2**20)."""

    args: MegatronArgs
    num_microbatches: int | None
    weight_and_optimizer_bytes: float
    activation_bytes: float
    activation_formula: str  # "with_sp" (Korthikanti Table 2) or "without_sp"

    @property
    def total_bytes(self) -> float:
        return self.weight_and_optimizer_bytes + self.activation_bytes


def _moe_layout(a: MegatronArgs) -> tuple[list[int], int, int]:
    """(moe_layer_pattern, dense layers, MoE layers): every moe_layer_freq-th layer, or the given 0/1 list."""
    if a.num_experts is None:
        return [0] * a.num_layers, a.num_layers, 0
    if isinstance(a.moe_layer_freq, int):
        pattern = [1 if i % a.moe_layer_freq == 0 else 0 for i in range(a.num_layers)]
    else:
        pattern = list(a.moe_layer_freq)
        if len(pattern) != a.num_layers:
            raise ValueError(f"moe_layer_freq lists {len(pattern)} layers, the model has {a.num_layers}")
    return pattern, a.num_layers - sum(pattern), sum(pattern)


def _attention_params(a: MegatronArgs, norm_size: int) -> float:
    """Self-attention parameters per layer: MLA's projections, or 2 d^2 (1 + g/h) (h k_c / d) for MHA/GQA."""
    if a.multi_latent_attention:
        heads = a.num_attention_heads
        if a.q_lora_rank is None:
            q_term = a.hidden_size * heads * (a.qk_head_dim + a.qk_pos_emb_head_dim)
        else:
            q_term = a.q_lora_rank * (a.hidden_size + heads * (a.qk_head_dim + a.qk_pos_emb_head_dim) + norm_size)
        return (q_term
                + a.kv_lora_rank * (a.hidden_size + heads * (a.qk_head_dim + a.v_head_dim) + norm_size)
                + a.hidden_size * a.qk_pos_emb_head_dim
                + (heads * a.v_head_dim) * a.hidden_size)  # fmt: skip
    groups = a.num_query_groups if a.group_query_attention else a.num_attention_heads
    query_ratio = a.kv_channels * a.num_attention_heads / a.hidden_size
    return 2 * a.hidden_size * a.hidden_size * ((1 + (groups / a.num_attention_heads)) * query_ratio)


def weight_and_optimizer_bytes(a: MegatronArgs) -> float:
    """`compute_weight_and_optimizer_memory`: the most loaded model shard (the first pipeline stage, with the
    embedding and the MTP block) times 18 B per parameter, or 6 + 12/dp with the distributed optimizer."""
    pattern, dense_layers, moe_layers = _moe_layout(a)
    experts = 1 if a.num_experts is None else a.num_experts
    gated = 3 / 2 if a.swiglu else 1
    shared_ffn = a.moe_shared_expert_intermediate_size or 0
    moe_ffn = a.moe_ffn_hidden_size if a.num_experts is not None else 0
    mtp_moe = pattern[-1] * a.mtp_num_layers if a.mtp_num_layers is not None else 0
    mtp_dense = (1 - pattern[-1]) * a.mtp_num_layers if a.mtp_num_layers is not None else 0
    norm_size = 1 if a.normalization == "RMSNorm" else 2
    d = a.hidden_size

    attention = _attention_params(a, norm_size)
    embedding = d * a.padded_vocab_size
    final_norm = norm_size * d
    dense_mlp = 2 * d * a.ffn_hidden_size * gated
    shared_expert = 2 * d * shared_ffn * gated
    routed_hidden = a.moe_latent_size if a.moe_latent_size is not None else d
    routed_experts = 2 * routed_hidden * moe_ffn * experts * gated
    latent = 2 * d * a.moe_latent_size if a.num_experts is not None and a.moe_latent_size is not None else 0
    norms = 2 * d * norm_size
    router = (d * experts) + (experts if a.add_bias_linear else 0) if a.num_experts is not None else 0
    shared_gate = d if shared_ffn > 0 and a.moe_shared_expert_gate else 0

    tp_sharded_block = (attention + dense_mlp) * dense_layers + (attention + shared_expert) * moe_layers
    replicated_block = norms * dense_layers + (norms + latent + router + shared_gate) * moe_layers + final_norm
    expert_block = routed_experts * moe_layers
    tp_sharded_mtp = (attention + dense_mlp) * mtp_dense + (attention + shared_expert) * mtp_moe
    replicated_mtp = norms * mtp_dense + (norms + latent + router + shared_gate) * mtp_moe
    expert_mtp = routed_experts * mtp_moe

    tp, pp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size
    etp, ep = a.expert_tensor_parallel_size, a.expert_model_parallel_size
    expert_dp = a.world_size // (etp * ep * pp)
    tp_sharded = ((tp_sharded_block / pp) + tp_sharded_mtp + embedding) / tp
    replicated = (replicated_block / pp) + replicated_mtp
    expert_sharded = ((expert_block / pp) + expert_mtp) / (etp * ep)
    if a.untie_embeddings_and_output_weights and pp == 1:
        tp_sharded += embedding / tp

    def bytes_per_param(data_parallel_size: int) -> float:
        if not a.use_distributed_optimizer:
            return BYTES_PER_PARAM
        return DISTRIBUTED_OPTIMIZER_UNSHARDED + (DISTRIBUTED_OPTIMIZER_SHARDED / data_parallel_size)

    return (tp_sharded + replicated) * bytes_per_param(a.data_parallel_size) + expert_sharded * bytes_per_param(expert_dp)


def _in_flight_factor(a: MegatronArgs, num_microbatches: int | None) -> float:
    """Interleaved 1F1B: 1 + (p - 1) / (p v); plain 1F1B with fewer micro-batches than stages: m / p."""
    p, v = a.pipeline_model_parallel_size, a.virtual_pipeline_model_parallel_size
    if v is not None:
        return 1 + ((p - 1) / (p * v))
    if p > 1 and num_microbatches is not None:
        return min(1, num_microbatches / p)
    return 1


def activation_bytes_with_sp(a: MegatronArgs, num_microbatches: int | None) -> float:
    """`compute_activation_memory`: s b d (18 + 4 f/d) per layer x L (first stage: L/p layers x p micro-batches),
    the embedding's input and dropout, the output layer and loss when p = 1, all divided by t."""
    s, b, d, p = a.seq_length, a.micro_batch_size, a.hidden_size, a.pipeline_model_parallel_size
    memory = (s * b * d) * (18 + (4 * (a.ffn_hidden_size / d)))
    memory *= a.num_layers
    memory += 8 * s * b * p
    memory += s * b * d * p
    if a.virtual_pipeline_model_parallel_size is not None or (p > 1 and num_microbatches is not None):
        memory *= _in_flight_factor(a, num_microbatches)
    if p == 1:
        memory += s * b * d * 4 * (1 + (a.padded_vocab_size / d))
    return memory / a.tensor_model_parallel_size


def activation_bytes_without_sp(a: MegatronArgs, num_microbatches: int | None) -> float:
    """`compute_activation_memory_without_sp`: s b d (10 + 24/t) per layer x L, the embedding's input and dropout,
    the logits (1/t) and final norm output in 2 B when p = 1, times 1.05."""
    s, b, d, p, t = a.seq_length, a.micro_batch_size, a.hidden_size, a.pipeline_model_parallel_size, \
        a.tensor_model_parallel_size
    total = s * b * d * (10 + (24 / t))
    total = total * a.num_layers
    total += 8 * s * b * p
    total += s * b * d * p
    if a.virtual_pipeline_model_parallel_size is not None or (p > 1 and num_microbatches is not None):
        total *= _in_flight_factor(a, num_microbatches)
    if p == 1:
        logits = s * b * a.padded_vocab_size
        logits /= t
        total += (logits + s * b * d) * 2
    total *= WITHOUT_SP_OVERHEAD
    return total


def theoretical_memory(a: MegatronArgs, num_microbatches: int | None = None) -> MegatronEstimate:
    """`report_theoretical_memory`'s two figures: the Table 2 formula with sequence parallelism and selective
    recompute, the without-SP formula otherwise (whatever the recompute)."""
    with_sp = a.sequence_parallel and a.recompute_granularity == "selective"
    activations = activation_bytes_with_sp if with_sp else activation_bytes_without_sp
    return MegatronEstimate(
        args=a, num_microbatches=num_microbatches,
        weight_and_optimizer_bytes=weight_and_optimizer_bytes(a),
        activation_bytes=activations(a, num_microbatches),
        activation_formula="with_sp" if with_sp else "without_sp",
    )


def padded_vocab_size(vocab_size: int, tensor_parallel: int, divisible_by: int = 128) -> int:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (128) x tp
    (megatron/core/tokenizers/utils/build_tokenizer.py, vocab_size_with_padding)."""
    multiple = divisible_by * tensor_parallel
    return int(math.ceil(vocab_size / multiple) * multiple)
