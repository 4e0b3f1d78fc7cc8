"""A model's shape and a parallel mesh, as the Megatron-LM arguments its memory formula reads.

How each argument is set, and what Megatron's formula does not see of the model (qk-norms, biases, learned
positions, Gemma's extra norms), is in docs/megatron.md. Divisibility is checked as Megatron checks it
(megatron/training/arguments.py) in zeroplan.models.mesh, shared with zeroplan's own model. Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.megatron.theory import MegatronArgs, padded_vocab_size
from zeroplan.models.architecture import Architecture
from zeroplan.models.mesh import Mesh, check_mesh, megatron_problems


def megatron_args(arch: Architecture, mesh: Mesh, *, seq_len: int, micro_batch: int, distributed_optimizer: bool,
                  recompute: str | None) -> MegatronArgs:
    """The arguments Megatron-LM would be launched with for this model and mesh (docs/megatron.md has the table)."""
    if arch.num_encoder_layers:
        raise ZeroplanError(f"--method megatron models decoder-only GPT models; {arch.family} is an encoder-decoder")
    if arch.linear_num_key_heads:
        raise ZeroplanError(f"--method megatron: Megatron's formula has no linear-attention layers, and {arch.family} "
                            f"has {arch.attention_types.count('linear_attention')}")
    check_mesh(mesh, arch)
    if mesh.pp_first_layers is not None or mesh.pp_last_layers is not None:
        raise ZeroplanError("--method megatron: Megatron's theoretical-memory formula counts L / pp layers per stage; "
                            "--pp-first-layers / --pp-last-layers are modelled by zeroplan's own method only")
    if found := megatron_problems(mesh, arch.num_layers):
        raise ZeroplanError(found[0])
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
