"""RMSNorm decoder families with a gated (SwiGLU/GeGLU) MLP: Llama, Mistral, Mixtral, Qwen2, Gemma 2, Phi-3.

Keys and defaults are those of the transformers config classes (configuration_<family>.py,
transformers 5.x); only keys that change the parameter count or the Architecture are modelled.
Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.families.base import FamilyConfig, check_divides

GEMMA2_NORMS_PER_LAYER = 4  # Gemma2DecoderLayer: input, post_attention, pre_feedforward, post_feedforward


class RMSNormDecoderConfig(FamilyConfig):
    """Keys every RMSNorm family shares. `None` kv heads or head_dim means the transformers default."""

    vocab_size: PositiveInt
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt | None
    head_dim: PositiveInt | None = None
    max_position_embeddings: PositiveInt
    attention_dropout: NonNegativeFloat = 0.0
    tie_word_embeddings: bool = False

    @model_validator(mode="after")
    def _check_heads(self) -> RMSNormDecoderConfig:
        if self.head_dim is None:
            check_divides("num_attention_heads", self.num_attention_heads, "hidden_size", self.hidden_size)
        check_divides("num_key_value_heads", self.kv_heads, "num_attention_heads", self.num_attention_heads)
        return self

    @property
    def kv_heads(self) -> int:
        """num_key_value_heads, defaulting to num_attention_heads (plain multi-head attention)."""
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def attention_head_dim(self) -> int:
        """head_dim, defaulting to hidden_size // num_attention_heads."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def _architecture(self, **overrides: Any) -> Architecture:
        fields = dict(
            family=self.model_type,
            hidden_size=self.hidden_size,
            num_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.attention_head_dim,
            intermediate_size=self.intermediate_size,
            vocab_size=self.vocab_size,
            gated_mlp=True,
            norm="rmsnorm",
            tie_word_embeddings=self.tie_word_embeddings,
            attention_dropout=self.attention_dropout,
        )
        return Architecture(**(fields | overrides))

    def architecture(self) -> Architecture:
        return self._architecture()


class LlamaConfig(RMSNormDecoderConfig):
    """Llama 1/2/3.x (`LlamaConfig`, defaults = Llama-7B)."""

    model_type: Literal["llama"]
    vocab_size: PositiveInt = 32000
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 11008
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = None
    max_position_embeddings: PositiveInt = 2048
    attention_bias: bool = False
    mlp_bias: bool = False


class MistralConfig(RMSNormDecoderConfig):
    """Mistral (`MistralConfig`, defaults = Mistral-7B-v0.1): grouped-query, sliding-window attention."""

    model_type: Literal["mistral"]
    vocab_size: PositiveInt = 32000
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 14336
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 8
    max_position_embeddings: PositiveInt = 4096 * 32
    sliding_window: PositiveInt | None = 4096

    def architecture(self) -> Architecture:
        return self._architecture(sliding_window=self.sliding_window)


class MixtralConfig(RMSNormDecoderConfig):
    """Mixtral (`MixtralConfig`, defaults = Mixtral-8x7B): a routed SwiGLU mixture of experts per layer."""

    model_type: Literal["mixtral"]
    vocab_size: PositiveInt = 32000
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 14336
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 8
    max_position_embeddings: PositiveInt = 4096 * 32
    sliding_window: PositiveInt | None = None
    num_local_experts: PositiveInt = 8
    num_experts_per_tok: PositiveInt = 2

    @model_validator(mode="after")
    def _check_experts(self) -> MixtralConfig:
        if self.num_experts_per_tok > self.num_local_experts:
            raise ValueError(
                f"num_experts_per_tok ({self.num_experts_per_tok}) is more than num_local_experts "
                f"({self.num_local_experts})"
            )
        return self

    def architecture(self) -> Architecture:
        return self._architecture(
            sliding_window=self.sliding_window,
            num_experts=self.num_local_experts,
            num_experts_per_tok=self.num_experts_per_tok,
        )


class Qwen2Config(RMSNormDecoderConfig):
    """Qwen2 / Qwen2.5 (`Qwen2Config`): Llama shape plus q/k/v biases.

    head_dim is no Qwen2Config field, but Qwen2Attention reads it when a config.json has it.
    """

    model_type: Literal["qwen2"]
    vocab_size: PositiveInt = 151936
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 22016
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 32
    max_position_embeddings: PositiveInt = 32768
    use_sliding_window: bool = False
    sliding_window: PositiveInt | None = 4096
    max_window_layers: int = 28

    @property
    def effective_sliding_window(self) -> int | None:
        """Qwen2Config: layers from max_window_layers on use the window, and only with use_sliding_window."""
        if self.use_sliding_window and self.max_window_layers < self.num_hidden_layers:
            return self.sliding_window
        return None

    def architecture(self) -> Architecture:
        return self._architecture(sliding_window=self.effective_sliding_window)


class Gemma2Config(RMSNormDecoderConfig):
    """Gemma 2 (`Gemma2Config`, defaults = gemma-2-2b): four norms per layer, logit soft-capping, tied head."""

    model_type: Literal["gemma2"]
    vocab_size: PositiveInt = 256000
    hidden_size: PositiveInt = 2304
    intermediate_size: PositiveInt = 9216
    num_hidden_layers: PositiveInt = 26
    num_attention_heads: PositiveInt = 8
    num_key_value_heads: PositiveInt | None = 4
    head_dim: PositiveInt | None = 256
    max_position_embeddings: PositiveInt = 8192
    attention_bias: bool = False
    sliding_window: PositiveInt | None = 4096
    attn_logit_softcapping: PositiveFloat | None = 50.0
    final_logit_softcapping: PositiveFloat | None = 30.0
    tie_word_embeddings: bool = True

    def architecture(self) -> Architecture:
        return self._architecture(
            norms_per_layer=GEMMA2_NORMS_PER_LAYER,
            sliding_window=self.sliding_window,
            attn_logit_softcapping=self.attn_logit_softcapping,
            final_logit_softcapping=self.final_logit_softcapping,
        )


class Phi3Config(RMSNormDecoderConfig):
    """Phi-3 (`Phi3Config`, defaults = Phi-3-mini): fused qkv_proj and gate_up_proj.

    head_dim is no Phi3Config field, but Phi3Attention reads it when a config.json has it.
    """

    model_type: Literal["phi3"]
    vocab_size: PositiveInt = 32064
    hidden_size: PositiveInt = 3072
    intermediate_size: PositiveInt = 8192
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = None
    max_position_embeddings: PositiveInt = 4096
    sliding_window: PositiveInt | None = None
    resid_pdrop: NonNegativeFloat = 0.0
    embd_pdrop: NonNegativeFloat = 0.0

    def architecture(self) -> Architecture:
        return self._architecture(sliding_window=self.sliding_window, dropout=self.resid_pdrop)
