"""Mixture-of-experts and hybrid decoders of 2025-26 read by transformers 5.25: OLMoE, ERNIE 4.5 MoE, Qwen3-VL-MoE's
language model, Qwen3.5's (dense and MoE: Qwen3-Next's gated delta net with its projections split) and DeepSeek-V3.2
(DeepSeek-V3 with a lightning indexer).

Keys and defaults are those of transformers==5.25.0 models/<family>/configuration_<family>.py, the modules those of
modeling_<family>.py. Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import NonNegativeInt, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLA, MLP, Decoder, Layer, LinearAttention, MoE
from zeroplan.models.families.deepseek import DeepseekV3Config
from zeroplan.models.families.moe import FULL_ATTENTION, MoEDecoderConfig, check_top_k
from zeroplan.models.families.qwen import Qwen3NextConfig, _QwenMoEConfig


class OlmoeConfig(MoEDecoderConfig):
    """OLMoE (`OlmoeConfig`, modeling_olmoe.py, defaults = OLMoE-1B-7B): q/k RMSNorms over all heads (as OLMo 2),
    pre-norms, every layer routed (gate: E x d, experts (E, 2 I, d), (E, d, I)), no shared expert.

    P = V d + L (d (h + 2 k) h_d + h h_d d + (h + k) h_d + E d + 3 E d I + 2 d) + d (+ V d if untied;
    + (h + 2 k) h_d + d per layer with attention_bias)
    """

    ALIASES: ClassVar[dict[str, str]] = {"num_local_experts": "num_experts"}  # OlmoeConfig.attribute_map
    model_type: Literal["olmoe"]
    vocab_size: PositiveInt = 50304
    hidden_size: PositiveInt = 2048
    intermediate_size: PositiveInt = 2048
    num_hidden_layers: PositiveInt = 16
    num_attention_heads: PositiveInt = 16
    num_key_value_heads: PositiveInt | None = 16
    max_position_embeddings: PositiveInt = 4096
    attention_bias: bool = False
    num_experts: PositiveInt = 64
    num_local_experts: PositiveInt | None = None
    num_experts_per_tok: PositiveInt = 8
    norm_topk_prob: bool = False

    @model_validator(mode="after")
    def _check_experts(self) -> OlmoeConfig:
        check_top_k("num_experts_per_tok", self.num_experts_per_tok, "num_experts", self.routed_experts)
        return self

    @property
    def routed_experts(self) -> int:
        return self.resolved("num_experts")

    @property
    def top_k(self) -> int:
        return self.num_experts_per_tok

    def decoder(self) -> Decoder:
        attention = self._attention(self.attention_bias, self.attention_bias, qk_norm="full")
        moe = MoE(experts=self.routed_experts, top_k=self.top_k, inner=self.intermediate_size)
        return self._stack(lambda i, kind, routes: Layer(mixer=attention, mlp=moe))

    def architecture(self) -> Architecture:
        return self._moe_architecture(router_norm_topk=self.norm_topk_prob)


class Ernie4_5_MoeConfig(MoEDecoderConfig):  # noqa: N801  (transformers' class name)
    """ERNIE 4.5 MoE (`Ernie4_5_MoeConfig`, modeling_ernie4_5_moe.py, defaults = ERNIE-4.5-21B-A3B): layer i routes
    when (i + 1) is a multiple of moe_layer_interval and moe_layer_start_index <= i <= moe_layer_end_index; a routed
    layer holds the router (gate: E x d, and gate.moe_statics.e_score_correction_bias (1, E), a parameter), the
    experts of width moe_intermediate_size and one shared MLP of moe_num_shared_experts x that width; q/k/v/o, the
    MLPs and the LM head take use_bias. The multi-token-prediction layers (num_nextn_predict_layers) are not built.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 2 d) + L_moe (E d + E + 3 E d I_e + 3 d S I_e) + L_dense 3 d I + d
    (+ V d if untied; biases with use_bias)
    """

    ALIASES: ClassVar[dict[str, str]] = {"num_experts": "moe_num_experts", "num_experts_per_tok": "moe_k"}
    model_type: Literal["ernie4_5_moe"]
    vocab_size: PositiveInt = 103424
    hidden_size: PositiveInt = 2560
    intermediate_size: PositiveInt = 12288
    num_hidden_layers: PositiveInt = 28
    num_attention_heads: PositiveInt = 20
    num_key_value_heads: PositiveInt | None = 4
    max_position_embeddings: PositiveInt = 131072
    tie_word_embeddings: bool = True
    use_bias: bool = False
    moe_intermediate_size: PositiveInt = 1536
    moe_k: PositiveInt = 6
    moe_num_experts: PositiveInt = 64
    num_experts: PositiveInt | None = None
    num_experts_per_tok: PositiveInt | None = None
    moe_num_shared_experts: NonNegativeInt = 2
    moe_layer_start_index: NonNegativeInt = 1
    moe_layer_end_index: int = 27
    moe_layer_interval: PositiveInt = 1
    num_nextn_predict_layers: NonNegativeInt | None = None

    @model_validator(mode="after")
    def _check_experts(self) -> Ernie4_5_MoeConfig:
        check_top_k("moe_k", self.top_k, "moe_num_experts", self.routed_experts)
        return self

    @property
    def routed_experts(self) -> int:
        return self.resolved("moe_num_experts")

    @property
    def top_k(self) -> int:
        return self.resolved("moe_k")

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size

    def moe_layer_indices(self) -> list[int]:
        return [i for i in range(self.num_hidden_layers) if (i + 1) % self.moe_layer_interval == 0
                and self.moe_layer_start_index <= i <= self.moe_layer_end_index]

    def notes(self) -> tuple[str, ...]:
        if self.num_nextn_predict_layers:
            return (f"the {self.num_nextn_predict_layers} multi-token-prediction layer(s) of the checkpoint are not "
                    "counted (transformers builds num_hidden_layers only)",)
        return ()

    def decoder(self) -> Decoder:
        attention = self._attention(self.use_bias, self.use_bias)
        dense = MLP(inner=self.intermediate_size, bias=self.use_bias)
        width = self.moe_intermediate_size * self.moe_num_shared_experts
        shared = MLP(inner=width, bias=self.use_bias, prefix="shared_experts") if width else None
        moe = MoE(experts=self.routed_experts, top_k=self.top_k, inner=self.moe_intermediate_size, shared=shared,
                  router_statics=True)
        dec = self._stack(lambda i, kind, routes: Layer(mixer=attention, mlp=moe if routes else dense))
        return Decoder(**{**dec.__dict__, "lm_head_bias": self.use_bias})


class Qwen3VLMoeTextConfig(_QwenMoEConfig):
    """Qwen3-VL-MoE's language model (`Qwen3VLMoeTextConfig`, modeling_qwen3_vl_moe.py): Qwen3-MoE's modules (per-head
    q/k norms, routed experts, decoder_sparse_step, mlp_only_layers); the LM head tied as the outer config says.

    P = the Qwen3-MoE formula
    """

    ALIASES: ClassVar[dict[str, str]] = {"num_experts": "num_local_experts"}  # Qwen3VLMoeTextConfig.attribute_map
    model_type: Literal["qwen3_vl_moe_text"]
    vocab_size: PositiveInt = 151936
    hidden_size: PositiveInt = 2048
    intermediate_size: PositiveInt = 5632
    num_hidden_layers: PositiveInt = 24
    num_attention_heads: PositiveInt = 16
    num_key_value_heads: PositiveInt | None = 16
    head_dim: PositiveInt | None = 128
    max_position_embeddings: PositiveInt = 128000
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    num_local_experts: NonNegativeInt = 60
    num_experts: NonNegativeInt | None = None
    num_experts_per_tok: PositiveInt = 4
    moe_intermediate_size: PositiveInt = 1408

    @property
    def routed_experts(self) -> int:
        return self.resolved("num_local_experts")

    def _moe_architecture(self, **overrides: Any) -> Architecture:
        # Qwen3VLMoeTextTopKRouter renormalises the top-k weights always; the config has no norm_topk_prob
        return MoEDecoderConfig._moe_architecture(self, router_norm_topk=True, **overrides)

    def decoder(self) -> Decoder:
        attention = self._attention(self.attention_bias, self.attention_bias, qk_norm="head")
        return self._stack(lambda i, kind, routes: Layer(mixer=attention, mlp=self._mlp(routes, None)))


class Qwen3_5MoeTextConfig(Qwen3NextConfig):  # noqa: N801  (transformers' class name)
    """Qwen3.5-MoE's language model (`Qwen3_5MoeTextConfig`, modeling_qwen3_5_moe.py): Qwen3-Next's layers (gated
    delta net in three of four layers, gated full attention in the fourth, routed experts and a gated shared expert
    in every layer), the delta net's input projections apart: in_proj_qkv (2 K + V), in_proj_z (V), in_proj_b and
    in_proj_a (H_v each).

    P = the Qwen3-Next formula (the split projections hold the same weights)
    """

    model_type: Literal["qwen3_5_moe_text"]  # type: ignore[assignment]
    vocab_size: PositiveInt = 248320
    hidden_size: PositiveInt = 2048
    num_hidden_layers: PositiveInt = 40
    num_key_value_heads: PositiveInt = 2
    num_experts: NonNegativeInt = 256
    num_experts_per_tok: PositiveInt = 8
    max_position_embeddings: PositiveInt = 32768

    def _moe_architecture(self, **overrides: Any) -> Architecture:
        # Qwen3_5MoeTopKRouter renormalises the top-k weights always; the config has no norm_topk_prob
        return MoEDecoderConfig._moe_architecture(self, router_norm_topk=True, **overrides)

    def linear_attention(self) -> LinearAttention:
        return LinearAttention(key_heads=self.linear_num_key_heads, value_heads=self.linear_num_value_heads,
                               key_head_dim=self.linear_key_head_dim, value_head_dim=self.linear_value_head_dim,
                               conv_kernel=self.linear_conv_kernel_dim, split=True)

    def decoder(self) -> Decoder:
        full = self._attention(self.attention_bias, self.attention_bias, qk_norm="head", output_gate=True)
        linear = self.linear_attention()
        shared = self.shared_expert_intermediate_size
        return self._stack(lambda i, kind, routes: Layer(mixer=full if kind == FULL_ATTENTION else linear,
                                                         mlp=self._mlp(routes, shared), attention_type=kind))


class Qwen3_5TextConfig(Qwen3_5MoeTextConfig):  # noqa: N801  (transformers' class name)
    """Qwen3.5's dense language model (`Qwen3_5TextConfig`, modeling_qwen3_5.py): Qwen3.5-MoE's mixers with a dense
    SwiGLU MLP of intermediate_size in every layer.

    P = V d + L_lin (d (2 K + 2 V) + 2 d H_v + (2 K + V) k_c + 2 H_v + d_v + V d)
        + L_full (2 d h h_d + 2 d k h_d + h h_d d + 2 h_d) + L (3 d I + 2 d) + d (+ V d if untied)
    """

    model_type: Literal["qwen3_5_text"]  # type: ignore[assignment]
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 12288
    num_hidden_layers: PositiveInt = 32
    num_key_value_heads: PositiveInt = 4
    num_experts: NonNegativeInt = 0
    num_experts_per_tok: PositiveInt = 1
    moe_intermediate_size: PositiveInt = 1
    shared_expert_intermediate_size: NonNegativeInt = 0

    def moe_layer_indices(self) -> list[int]:
        return []

    def decoder(self) -> Decoder:
        full = self._attention(self.attention_bias, self.attention_bias, qk_norm="head", output_gate=True)
        linear, mlp = self.linear_attention(), MLP(inner=self.intermediate_size)
        return self._stack(lambda i, kind, routes: Layer(mixer=full if kind == FULL_ATTENTION else linear, mlp=mlp,
                                                         attention_type=kind))


class DeepseekV32Config(DeepseekV3Config):
    """DeepSeek-V3.2 (`DeepseekV32Config`, modeling_deepseek_v32.py, transformers 5.25): DeepSeek-V3 with a lightning
    indexer in every layer's attention (DeepseekV32Indexer: wq_b from the low-rank query, wk, k_norm, weights_proj),
    which picks the index_topk keys each query attends to; dense layers from mlp_layer_types (derived from
    first_k_dense_replace when absent).

    P = DeepSeek-V3's formula + L (r_q H_i d_i + d d_i + 2 d_i + d H_i)   (H_i index_n_heads, d_i index_head_dim)
    """

    ALIASES: ClassVar[dict[str, str]] = DeepseekV3Config.ALIASES
    model_type: Literal["deepseek_v32"]  # type: ignore[assignment]
    max_position_embeddings: PositiveInt = 163840
    index_n_heads: PositiveInt = 64
    index_head_dim: PositiveInt = 128
    index_topk: PositiveInt = 2048
    mlp_layer_types: list[Literal["dense", "sparse"]] | None = None

    @model_validator(mode="after")
    def _check_indexer(self) -> DeepseekV32Config:
        if self.q_lora_rank is None:
            raise ValueError("q_lora_rank is null: DeepSeek-V3.2's indexer projects the low-rank query (wq_b reads "
                             "q_lora_rank features)")
        if self.mlp_layer_types is not None and len(self.mlp_layer_types) != self.num_hidden_layers:
            raise ValueError(f"mlp_layer_types has {len(self.mlp_layer_types)} entries, num_hidden_layers is "
                             f"{self.num_hidden_layers}")
        return self

    def moe_layer_indices(self) -> list[int]:
        if self.mlp_layer_types is not None:
            return [i for i, kind in enumerate(self.mlp_layer_types) if kind == "sparse"]
        return super().moe_layer_indices()

    def _mla(self) -> MLA:
        return replace(super()._mla(), indexer=(self.index_n_heads, self.index_head_dim))
