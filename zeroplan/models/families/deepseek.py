"""DeepSeek-style MoE decoders: DeepSeek-V2, DeepSeek-V3 (and Kimi K2, which ships as it), GLM-4.5 (glm4_moe).

The first `first_k_dense_replace` layers are dense SwiGLU MLPs of width `intermediate_size`; every later layer
has `n_routed_experts` experts of width `moe_intermediate_size`, top-`num_experts_per_tok`, and
`n_shared_experts` shared experts fused into one SwiGLU of width n_shared x moe_intermediate_size
(modeling_deepseek_v3.py DeepseekV3DecoderLayer / DeepseekV3MoE, transformers v5.24.0). DeepSeek-V2/V3 attend
with multi-head latent attention (MLA); GLM-4.5 with grouped-query attention. Multi-token-prediction layers
(`num_nextn_predict_layers`) are in the checkpoints but transformers does not build them.
Keys and defaults are those of configuration_<family>.py (transformers v5.24.0). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import NonNegativeInt, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLA, MLP, Decoder, Layer, Mixer, MoE
from zeroplan.models.families.base import check_divides
from zeroplan.models.families.moe import MoEDecoderConfig, check_top_k


class _DeepseekStyleConfig(MoEDecoderConfig):
    """Routed + shared experts after `first_k_dense_replace` dense layers."""

    n_routed_experts: PositiveInt
    n_shared_experts: NonNegativeInt
    num_experts_per_tok: PositiveInt | None
    moe_intermediate_size: PositiveInt
    first_k_dense_replace: NonNegativeInt
    # Routing facts only the activations read (the router's saved tensors); Glm4MoeConfig's defaults here,
    # DeepseekV3Config's (8, 4) and DeepseekV2Config's (None, None, False) in their classes.
    norm_topk_prob: bool | None = True
    n_group: PositiveInt | None = 1
    topk_group: PositiveInt | None = 1

    def _moe_architecture(self, **overrides: Any) -> Architecture:
        return super()._moe_architecture(router_norm_topk=bool(self.norm_topk_prob), router_groups=self.n_group or 1,
                                         router_topk_groups=self.topk_group or 1, **overrides)

    @model_validator(mode="after")
    def _check_experts(self) -> _DeepseekStyleConfig:
        check_top_k("num_experts_per_tok", self.num_experts_per_tok, "n_routed_experts", self.n_routed_experts)
        return self

    @property
    def routed_experts(self) -> int:
        return self.n_routed_experts

    @property
    def top_k(self) -> int:
        return self.num_experts_per_tok or 0

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size

    @property
    def shared_intermediate_size(self) -> int:
        """The shared experts are one SwiGLU MLP n_shared times as wide (DeepseekV3MoE.shared_experts)."""
        return self.moe_intermediate_size * self.n_shared_experts

    def moe_layer_indices(self) -> list[int]:
        """`layer_idx >= config.first_k_dense_replace` (DeepseekV3DecoderLayer.__init__); the config classes
        type it `int | None`, but None fails that comparison in transformers, so zeroplan refuses null."""
        return list(range(self.first_k_dense_replace, self.num_hidden_layers))

    @property
    def mtp_layers(self) -> int:
        return 0

    @property
    def correction_bias(self) -> bool:
        """DeepSeek-V3's and GLM-4.5's router hold e_score_correction_bias, a persistent buffer (not counted)."""
        return True

    def _layers(self, mixer: Mixer, bias: bool = False) -> Decoder:
        """Dense layers (mlp: SwiGLU of intermediate_size), then MoE layers (mlp.experts, mlp.gate, and
        mlp.shared_experts: one SwiGLU of n_shared x moe_intermediate_size)."""
        moe = MoE(experts=self.routed_experts, top_k=self.top_k, inner=self.moe_intermediate_size,
                  shared=MLP(inner=self.shared_intermediate_size, prefix="shared_experts", bias=bias),
                  correction_bias=self.correction_bias)
        dense = MLP(inner=self.intermediate_size, bias=bias)
        return self._stack(lambda i, kind, routes: Layer(mixer=mixer, mlp=moe if routes else dense))

    def notes(self) -> tuple[str, ...]:
        if not self.mtp_layers:
            return ()
        return (f"num_nextn_predict_layers: {self.mtp_layers} multi-token-prediction layer(s) in the checkpoint, "
                "not built by transformers: not counted",)


class _MLAConfig(_DeepseekStyleConfig):
    """Multi-head latent attention (DeepseekV3Attention): q through a rank-`q_lora_rank` bottleneck (or one q_proj
    when it is null), k and v through a shared rank-`kv_lora_rank` latent plus a `qk_rope_head_dim` rope key."""

    q_lora_rank: PositiveInt | None
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt
    attention_bias: bool = False

    @model_validator(mode="after")
    def _check_heads(self) -> _MLAConfig:
        """MLA's shapes read neither head_dim nor d / h nor the kv heads (DeepseekV3Attention.__init__)."""
        return self

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def _mla(self) -> MLA:
        return MLA(heads=self.num_attention_heads, q_lora_rank=self.q_lora_rank, kv_lora_rank=self.kv_lora_rank,
                   qk_nope_head_dim=self.qk_nope_head_dim, qk_rope_head_dim=self.qk_rope_head_dim,
                   v_head_dim=self.v_head_dim, bias=self.attention_bias)


class DeepseekV2Config(_MLAConfig):
    """DeepSeek-V2 (`DeepseekV2Config`): MLA, softmax router; dense MLP and shared experts biased with mlp_bias.

    DeepseekV2Config leaves num_experts_per_tok None: a file must set it. Its __post_init__ refuses a
    hidden_size that num_attention_heads does not divide, and so does zeroplan.
    """

    ALIASES: ClassVar[dict[str, str]] = {"num_experts": "n_routed_experts"}  # DeepseekV2Config.attribute_map
    model_type: Literal["deepseek_v2"]
    norm_topk_prob: bool | None = False
    n_group: PositiveInt | None = None
    topk_group: PositiveInt | None = None
    vocab_size: PositiveInt = 102400
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 11008
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = None
    max_position_embeddings: PositiveInt = 2048
    mlp_bias: bool = False
    first_k_dense_replace: NonNegativeInt = 0
    kv_lora_rank: PositiveInt = 512
    q_lora_rank: PositiveInt | None = 1536
    n_routed_experts: PositiveInt = 64
    num_experts: PositiveInt | None = None
    n_shared_experts: NonNegativeInt = 2
    qk_nope_head_dim: PositiveInt = 128
    qk_rope_head_dim: PositiveInt = 64
    v_head_dim: PositiveInt = 128
    num_experts_per_tok: PositiveInt | None = None
    moe_intermediate_size: PositiveInt = 1407

    @model_validator(mode="after")
    def _check_hidden(self) -> DeepseekV2Config:
        check_divides("num_attention_heads", self.num_attention_heads, "hidden_size", self.hidden_size)
        return self

    @property
    def routed_experts(self) -> int:
        return self.resolved("n_routed_experts")

    @property
    def correction_bias(self) -> bool:
        return False  # DeepseekV2TopkRouter has no e_score_correction_bias

    def decoder(self) -> Decoder:
        """DeepseekV2ForCausalLM (modeling_deepseek_v2.py): MLA; dense MLP and shared experts biased with mlp_bias.

        P = V d + L (MLA + 2 d) + L_dense 3 d I + L_moe (3 E d I_e + E d + 3 d n_s I_e) + d (+ V d), with
        MLA = d r_q + r_q + r_q h (d_n + d_r) + d (r_kv + d_r) + r_kv + r_kv h (d_n + d_v) + h d_v d
        (q_proj d h (d_n + d_r) in place of the first three terms when q_lora_rank is null)
        """
        return self._layers(self._mla(), bias=self.mlp_bias)


class DeepseekV3Config(_MLAConfig):
    """DeepSeek-V3 / Kimi K2 (`DeepseekV3Config`, defaults = DeepSeek-V3): MLA, sigmoid router whose
    `e_score_correction_bias` is a persistent buffer (in the state dict, not a parameter)."""

    ALIASES: ClassVar[dict[str, str]] = {  # DeepseekV3Config.attribute_map
        "num_local_experts": "n_routed_experts",
        "num_mtp_layers": "num_nextn_predict_layers",
    }
    model_type: Literal["deepseek_v3", "kimi_k2"]  # Kimi K2's config.json says kimi_k2; its code is DeepSeek-V3
    n_group: PositiveInt | None = 8
    topk_group: PositiveInt | None = 4
    vocab_size: PositiveInt = 129280
    hidden_size: PositiveInt = 7168
    intermediate_size: PositiveInt = 18432
    moe_intermediate_size: PositiveInt = 2048
    num_hidden_layers: PositiveInt = 61
    num_attention_heads: PositiveInt = 128
    num_key_value_heads: PositiveInt | None = 128
    max_position_embeddings: PositiveInt = 4096
    n_shared_experts: NonNegativeInt = 1
    n_routed_experts: PositiveInt = 256
    num_local_experts: PositiveInt | None = None
    kv_lora_rank: PositiveInt = 512
    q_lora_rank: PositiveInt | None = 1536
    qk_rope_head_dim: PositiveInt = 64
    v_head_dim: PositiveInt = 128
    qk_nope_head_dim: PositiveInt = 128
    num_experts_per_tok: PositiveInt | None = 8
    first_k_dense_replace: NonNegativeInt = 3
    num_nextn_predict_layers: NonNegativeInt = 1
    num_mtp_layers: NonNegativeInt | None = None

    @property
    def routed_experts(self) -> int:
        return self.resolved("n_routed_experts")

    @property
    def mtp_layers(self) -> int:
        return self.resolved("num_nextn_predict_layers")

    def decoder(self) -> Decoder:
        """DeepseekV3ForCausalLM (modeling_deepseek_v3.py; DeepSeek-V3, Kimi K2): V2's formula without biases on the
        MLPs; the num_nextn_predict_layers MTP layers are not built (the Decoder's notes say so)."""
        return self._layers(self._mla())


class Glm4MoeConfig(_DeepseekStyleConfig):
    """GLM-4.5 / GLM-4.5-Air (`Glm4MoeConfig`): grouped-query attention with q/k/v biases (attention_bias), an
    optional per-head qk RMSNorm, DeepSeek-V3's router (its correction bias a buffer) and layer layout.

    head_dim is no Glm4MoeConfig field; Glm4MoeAttention reads it when the file has it, else d / h.
    """

    ALIASES: ClassVar[dict[str, str]] = {  # Glm4MoeConfig.attribute_map
        "num_local_experts": "n_routed_experts",
        "num_mtp_layers": "num_nextn_predict_layers",
    }
    model_type: Literal["glm4_moe"]
    vocab_size: PositiveInt = 151552
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 10944
    num_hidden_layers: PositiveInt = 46
    num_attention_heads: PositiveInt = 96
    num_key_value_heads: PositiveInt = 8
    max_position_embeddings: PositiveInt = 131072
    attention_bias: bool = False
    moe_intermediate_size: PositiveInt = 1408
    num_experts_per_tok: PositiveInt | None = 8
    n_shared_experts: NonNegativeInt = 1
    n_routed_experts: PositiveInt = 128
    num_local_experts: PositiveInt | None = None
    first_k_dense_replace: NonNegativeInt = 1
    use_qk_norm: bool = False
    num_nextn_predict_layers: NonNegativeInt = 1
    num_mtp_layers: NonNegativeInt | None = None

    @model_validator(mode="after")
    def _check_heads(self) -> Glm4MoeConfig:
        """Its own defaults (96 heads of d = 4096, no head_dim) floor-divide: Glm4MoeAttention builds 96 x 42."""
        check_divides("num_key_value_heads", self.kv_heads, "num_attention_heads", self.num_attention_heads)
        return self

    @property
    def routed_experts(self) -> int:
        return self.resolved("n_routed_experts")

    @property
    def mtp_layers(self) -> int:
        return self.resolved("num_nextn_predict_layers")

    def decoder(self) -> Decoder:
        """Glm4MoeForCausalLM (modeling_glm4_moe.py): q/k/v biased with attention_bias, o_proj never; per-head
        q/k RMSNorms with use_qk_norm; DeepSeek-V3's MLP layout.

        P = V d + L (d (h + 2 k) h_d + [(h + 2 k) h_d] + h h_d d + [2 h_d] + 2 d) + L_dense 3 d I
            + L_moe (3 E d I_e + E d + 3 d n_s I_e) + d (+ V d)
        """
        return self._layers(self._attention(self.attention_bias, False,
                                            qk_norm="head" if self.use_qk_norm else "none"))
