"""A model's shape and a parallel mesh, as the Megatron-LM arguments its memory formula reads.

How each argument is set, and what Megatron's formula does not see of the model (qk-norms, biases, learned
positions, Gemma's extra norms), is in docs/megatron.md. Divisibility is checked as Megatron checks it
(megatron/training/arguments.py), each failure one line with the numbers. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.errors import ZeroplanError
from zeroplan.megatron.theory import MegatronArgs, padded_vocab_size
from zeroplan.models.architecture import Architecture


@dataclass(frozen=True, slots=True, kw_only=True)
class Mesh:
    """Megatron's parallel degrees: tensor, pipeline (with virtual stages), context, expert (and expert-tensor)."""

    gpus: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # None: the tensor-parallel size, Megatron's default
    vpp: int | None = None  # virtual stages per pipeline rank; None or 1: no interleaving
    sequence_parallel: bool = False

    @property
    def dp(self) -> int:
        """world_size // (tp x pp x cp), arguments.py's data_parallel_size."""
        return self.gpus // (self.tp * self.pp * self.cp)


def _check(mesh: Mesh, arch: Architecture) -> None:
    model_parallel = mesh.tp * mesh.pp * mesh.cp
    if mesh.gpus % model_parallel:
        raise ZeroplanError(f"--gpus {mesh.gpus} is not a multiple of tp x pp x cp = {mesh.tp} x {mesh.pp} x "
                            f"{mesh.cp} = {model_parallel}")
    if arch.num_attention_heads % mesh.tp:
        raise ZeroplanError(f"num_attention_heads ({arch.num_attention_heads}) is not a multiple of --tp {mesh.tp}")
    if arch.num_key_value_heads % mesh.tp:
        raise ZeroplanError(f"num_key_value_heads ({arch.num_key_value_heads}) is not a multiple of --tp {mesh.tp}")
    stages = mesh.pp * (mesh.vpp or 1)
    if arch.num_layers % stages:
        what = f"--pp {mesh.pp} x --vpp {mesh.vpp} = {stages}" if mesh.vpp else f"--pp {mesh.pp}"
        raise ZeroplanError(f"{arch.num_layers} layers do not split evenly into {what} pipeline stages")
    if mesh.vpp and mesh.pp == 1:
        raise ZeroplanError(f"--vpp {mesh.vpp} interleaves pipeline stages and needs --pp 2 or more")
    if arch.is_moe and arch.num_experts % mesh.ep:
        raise ZeroplanError(f"num_experts ({arch.num_experts}) is not a multiple of --ep {mesh.ep}")
    if not arch.is_moe and mesh.ep > 1:
        raise ZeroplanError(f"--ep {mesh.ep} divides experts, and {arch.family} has none")
    expert_parallel = (mesh.etp or mesh.tp) * mesh.ep * mesh.pp
    if mesh.gpus % expert_parallel:
        raise ZeroplanError(f"--gpus {mesh.gpus} is not a multiple of etp x ep x pp = {mesh.etp or mesh.tp} x "
                            f"{mesh.ep} x {mesh.pp} = {expert_parallel}")


def megatron_args(arch: Architecture, mesh: Mesh, *, seq_len: int, micro_batch: int, distributed_optimizer: bool,
                  recompute: str | None) -> MegatronArgs:
    """The arguments Megatron-LM would be launched with for this model and mesh (docs/megatron.md has the table)."""
    if arch.num_encoder_layers:
        raise ZeroplanError(f"--method megatron models decoder-only GPT models; {arch.family} is an encoder-decoder")
    if arch.linear_num_key_heads:
        raise ZeroplanError(f"--method megatron: Megatron's formula has no linear-attention layers, and {arch.family} "
                            f"has {arch.attention_types.count('linear_attention')}")
    _check(mesh, arch)
    return MegatronArgs(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        ffn_hidden_size=arch.dense_intermediate_size or arch.intermediate_size,
        num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_key_value_heads,
        group_query_attention=arch.num_key_value_heads != arch.num_attention_heads,
        kv_channels=arch.head_dim,
        swiglu=arch.gated_mlp,
        normalization="RMSNorm" if arch.norm == "rmsnorm" else "LayerNorm",
        padded_vocab_size=padded_vocab_size(arch.vocab_size, mesh.tp),
        untie_embeddings_and_output_weights=not arch.tie_word_embeddings,
        add_bias_linear=arch.norm == "layernorm",  # GPT-2-style models keep linear biases; Llama-style disable them
        num_experts=arch.num_experts or None,
        moe_ffn_hidden_size=arch.intermediate_size if arch.is_moe else None,
        moe_router_topk=arch.num_experts_per_tok if arch.is_moe else 2,
        moe_layer_freq=tuple(int(kind == "moe") for kind in arch.mlp_types) if arch.mlp_types else 1,
        moe_shared_expert_intermediate_size=arch.shared_expert_intermediate_size or None,
        moe_shared_expert_gate=arch.shared_expert_gate,
        multi_latent_attention=arch.is_mla,
        q_lora_rank=arch.q_lora_rank or None,
        kv_lora_rank=arch.kv_lora_rank,
        qk_head_dim=arch.qk_nope_head_dim,
        qk_pos_emb_head_dim=arch.qk_rope_head_dim,
        v_head_dim=arch.v_head_dim,
        world_size=mesh.gpus,
        tensor_model_parallel_size=mesh.tp,
        pipeline_model_parallel_size=mesh.pp,
        context_parallel_size=mesh.cp,
        expert_model_parallel_size=mesh.ep,
        expert_tensor_parallel_size=mesh.etp or mesh.tp,
        virtual_pipeline_model_parallel_size=mesh.vpp if mesh.vpp and mesh.vpp > 1 else None,
        data_parallel_size=mesh.dp,
        use_distributed_optimizer=distributed_optimizer,
        sequence_parallel=mesh.sequence_parallel and mesh.tp > 1,  # Megatron turns SP off when tp = 1
        recompute_granularity=recompute,
        seq_length=seq_len,
        micro_batch_size=micro_batch,
    )
