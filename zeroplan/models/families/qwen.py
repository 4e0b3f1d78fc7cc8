"""Qwen's MoE decoders: Qwen1.5/Qwen2-MoE, Qwen3-MoE and Qwen3-Next (transformers v5.24.0
configuration_<family>.py and modeling_<family>.py for qwen2_moe, qwen3_moe, qwen3_next). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import NonNegativeInt, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLP, Decoder, Layer, LinearAttention, MoE
from zeroplan.models.families.base import check_divides
from zeroplan.models.families.moe import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    MoEDecoderConfig,
    check_layer_types,
    check_top_k,
)


class _QwenMoEConfig(MoEDecoderConfig):
    """Qwen2-MoE / Qwen3-MoE / Qwen3-Next layer layout: layer i routes unless i is in mlp_only_layers or
    (i + 1) is no multiple of decoder_sparse_step (modeling_qwen3_moe.py Qwen3MoeDecoderLayer.__init__)."""

    ALIASES: ClassVar[dict[str, str]] = {"num_local_experts": "num_experts"}  # Qwen3MoeConfig.attribute_map
    num_experts: NonNegativeInt
    num_local_experts: NonNegativeInt | None = None
    num_experts_per_tok: PositiveInt
    moe_intermediate_size: PositiveInt
    decoder_sparse_step: PositiveInt = 1
    mlp_only_layers: list[NonNegativeInt] | None = None
    norm_topk_prob: bool = False  # Qwen2MoeConfig, Qwen3MoeConfig; Qwen3NextConfig's is True

    def _moe_architecture(self, **overrides: Any) -> Architecture:
        return super()._moe_architecture(router_norm_topk=self.norm_topk_prob, **overrides)

    @model_validator(mode="after")
    def _check_experts(self) -> _QwenMoEConfig:
        if self.routed_experts:
            check_top_k("num_experts_per_tok", self.num_experts_per_tok, "num_experts", self.routed_experts)
        return self

    @property
    def routed_experts(self) -> int:
        return self.resolved("num_experts")

    @property
    def top_k(self) -> int:
        return self.num_experts_per_tok if self.routed_experts else 0

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size

    def _mlp(self, routes: bool, shared: int | None) -> MLP | MoE:
        """Qwen*SparseMoeBlock (gate: the router, experts, and with `shared` a shared_expert SwiGLU of that width
        behind shared_expert_gate, d -> 1) where the layer routes; Qwen*MLP of intermediate_size where not."""
        if not routes:
            return MLP(inner=self.intermediate_size)
        shared_mlp = None if shared is None else MLP(inner=shared, prefix="shared_expert")
        return MoE(experts=self.routed_experts, top_k=self.top_k, inner=self.moe_intermediate_size,
                   shared=shared_mlp, shared_gate=shared is not None)

    def moe_layer_indices(self) -> list[int]:
        dense = set(self.mlp_only_layers or [])
        return [i for i in range(self.num_hidden_layers)
                if i not in dense and self.routed_experts > 0 and (i + 1) % self.decoder_sparse_step == 0]


class Qwen3MoeConfig(_QwenMoEConfig):
    """Qwen3-MoE (`Qwen3MoeConfig`): Qwen3 attention (per-head q/k RMSNorm), top-k routed SwiGLU experts.

    head_dim is no Qwen3MoeConfig field; Qwen3MoeAttention reads it when the file has it, else d / h.
    """

    model_type: Literal["qwen3_moe"]
    vocab_size: PositiveInt = 151936
    hidden_size: PositiveInt = 2048
    intermediate_size: PositiveInt = 6144
    num_hidden_layers: PositiveInt = 24
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt = 4
    max_position_embeddings: PositiveInt = 32768
    attention_bias: bool = False
    use_sliding_window: bool = False
    sliding_window: PositiveInt | None = 4096
    num_experts: NonNegativeInt = 128
    num_experts_per_tok: PositiveInt = 8
    moe_intermediate_size: PositiveInt = 768

    def decoder(self) -> Decoder:
        """Qwen3MoeForCausalLM (modeling_qwen3_moe.py).

        P = V d + L (d (h + 2 k) h_d + h h_d d + 2 h_d + 2 d) + L_moe (E d + 3 E d I_e) + L_dense 3 d I + d (+ V d)
        (+ (h + 2 k) h_d + d per layer with attention_bias: q, k, v and o)
        """
        attention = self._attention(self.attention_bias, self.attention_bias, qk_norm="head")
        return self._stack(lambda i, kind, routes: Layer(mixer=attention, mlp=self._mlp(routes, None)))

    def architecture(self) -> Architecture:
        # Qwen3MoeConfig.__post_init__: the window only applies with use_sliding_window.
        return self._moe_architecture(sliding_window=self.sliding_window if self.use_sliding_window else None)


class Qwen2MoeConfig(_QwenMoEConfig):
    """Qwen1.5/Qwen2-MoE (`Qwen2MoeConfig`): q/k/v biases (`qkv_bias`), routed experts plus one shared
    SwiGLU expert of width `shared_expert_intermediate_size` behind a sigmoid gate (a d -> 1 linear)."""

    model_type: Literal["qwen2_moe"]
    vocab_size: PositiveInt = 151936
    hidden_size: PositiveInt = 2048
    intermediate_size: PositiveInt = 5632
    num_hidden_layers: PositiveInt = 24
    num_attention_heads: PositiveInt = 16
    num_key_value_heads: PositiveInt | None = 16
    max_position_embeddings: PositiveInt = 32768
    qkv_bias: bool = True
    use_sliding_window: bool = False
    sliding_window: PositiveInt | None = 4096
    max_window_layers: int = 28
    num_experts: NonNegativeInt = 60
    num_experts_per_tok: PositiveInt = 4
    moe_intermediate_size: PositiveInt = 1408
    shared_expert_intermediate_size: NonNegativeInt = 5632
    layer_types: list[str] | None = None

    @model_validator(mode="after")
    def _check_layer_types(self) -> Qwen2MoeConfig:
        check_layer_types(self.layer_types, self.num_hidden_layers, (FULL_ATTENTION, SLIDING_ATTENTION))
        return self

    def attention_layer_types(self) -> list[str]:
        """Qwen2MoeConfig.__post_init__: odd-numbered layers below max_window_layers slide, if use_sliding_window."""
        if self.layer_types is not None:
            return list(self.layer_types)
        return [SLIDING_ATTENTION if (i + 1) % 2 and i < self.max_window_layers and self.use_sliding_window
                else FULL_ATTENTION for i in range(self.num_hidden_layers)]

    def decoder(self) -> Decoder:
        """Qwen2MoeForCausalLM (modeling_qwen2_moe.py): q/k/v biases with qkv_bias, a shared expert of width I_s.

        P = V d + L (d (h + 2 k) h_d + (h + 2 k) h_d + h h_d d + 2 d) + L_moe (E d + 3 E d I_e + 3 d I_s + d)
            + L_dense 3 d I + d (+ V d)
        """
        attention = self._attention(self.qkv_bias, False)
        shared = self.shared_expert_intermediate_size
        return self._stack(lambda i, kind, routes: Layer(mixer=attention, mlp=self._mlp(routes, shared),
                                                         attention_type=kind))

    def architecture(self) -> Architecture:
        window = self.sliding_window if SLIDING_ATTENTION in self.attention_layer_types() else None
        return self._moe_architecture(sliding_window=window)


class Qwen3NextConfig(_QwenMoEConfig):
    """Qwen3-Next (`Qwen3NextConfig`): gated delta-net linear attention in three of every four layers, gated
    full attention (q_proj twice as wide: query and output gate) in the fourth, MoE with a gated shared expert.

    `full_attention_interval` is no field: Qwen3NextConfig.__post_init__ pops it (default 4) to build layer_types.
    """

    model_type: Literal["qwen3_next"]
    norm_topk_prob: bool = True
    vocab_size: PositiveInt = 151936
    hidden_size: PositiveInt = 2048
    intermediate_size: PositiveInt = 5632
    num_hidden_layers: PositiveInt = 48
    num_attention_heads: PositiveInt = 16
    num_key_value_heads: PositiveInt = 2
    head_dim: PositiveInt = 256
    max_position_embeddings: PositiveInt = 32768
    attention_bias: bool = False
    linear_conv_kernel_dim: PositiveInt = 4
    linear_key_head_dim: PositiveInt = 128
    linear_value_head_dim: PositiveInt = 128
    linear_num_key_heads: PositiveInt = 16
    linear_num_value_heads: PositiveInt = 32
    num_experts: NonNegativeInt = 512
    num_experts_per_tok: PositiveInt = 10
    moe_intermediate_size: PositiveInt = 512
    shared_expert_intermediate_size: NonNegativeInt = 512
    full_attention_interval: PositiveInt = 4
    layer_types: list[str] | None = None

    @model_validator(mode="after")
    def _check_layer_types(self) -> Qwen3NextConfig:
        check_layer_types(self.layer_types, self.num_hidden_layers, (FULL_ATTENTION, LINEAR_ATTENTION))
        check_divides("linear_num_key_heads", self.linear_num_key_heads,
                      "linear_num_value_heads", self.linear_num_value_heads)
        if FULL_ATTENTION not in self.attention_layer_types():  # the heads zeroplan sizes attention by are theirs
            raise ValueError(f"no full_attention layer in {self.num_hidden_layers} layers (layer_types, or "
                             f"full_attention_interval {self.full_attention_interval}): not described")
        return self

    def attention_layer_types(self) -> list[str]:
        if self.layer_types is not None:
            return list(self.layer_types)
        interval = self.full_attention_interval
        return [LINEAR_ATTENTION if (i + 1) % interval else FULL_ATTENTION for i in range(self.num_hidden_layers)]

    def decoder(self) -> Decoder:
        """Qwen3NextForCausalLM (modeling_qwen3_next.py): linear_attention layers hold a Qwen3NextGatedDeltaNet,
        full_attention layers a gated attention (q_proj d -> 2 h h_d, per-head q/k norms); MLPs as Qwen2-MoE's.

        P = V d + L_lin (d (2 K + 2 V) + 2 d H_v + (2 K + V) k_c + 2 H_v + d_v + V d)
            + L_full (2 d h h_d + 2 d k h_d + h h_d d + 2 h_d) + L_moe (E d + 3 E d I_e + 3 d I_s + d)
            + L_dense 3 d I + 2 L d + d (+ V d),  K = H_k d_k, V = H_v d_v
        """
        full = self._attention(self.attention_bias, self.attention_bias, qk_norm="head", output_gate=True)
        linear = LinearAttention(key_heads=self.linear_num_key_heads, value_heads=self.linear_num_value_heads,
                                 key_head_dim=self.linear_key_head_dim, value_head_dim=self.linear_value_head_dim,
                                 conv_kernel=self.linear_conv_kernel_dim)
        shared = self.shared_expert_intermediate_size
        return self._stack(lambda i, kind, routes: Layer(
            mixer=linear if kind == LINEAR_ATTENTION else full, mlp=self._mlp(routes, shared), attention_type=kind))
