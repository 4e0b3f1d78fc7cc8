"""RMSNorm decoder families with a gated (SwiGLU/GeGLU) MLP: Llama, Mistral, Mixtral, Qwen2, Gemma 2, Phi-3.

Keys and defaults are those of the transformers config classes (configuration_<family>.py,
transformers 5.x); only keys that change the parameter count or the Architecture are modelled.
Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLP, Attention, Decoder, FeedForward, Layer, Mixer, MoE, uniform
from zeroplan.models.families.base import FamilyConfig, check_divides

# Gemma2DecoderLayer (and Gemma 3's): a norm before and after both attention and MLP ("sandwich").
SANDWICH_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm")
GEMMA2_NORMS_PER_LAYER = len(SANDWICH_NORMS)


class RMSNormDecoderConfig(FamilyConfig):
    """Keys every RMSNorm family shares. `None` kv heads or head_dim means the transformers default."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("hidden_size", "num_hidden_layers", "num_attention_heads")

    vocab_size: PositiveInt
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt | None
    head_dim: PositiveInt | None = None
    max_position_embeddings: PositiveInt
    attention_dropout: NonNegativeFloat = 0.0
    hidden_act: str | None = "silu"  # the MLP activation, as the config names it
    tie_word_embeddings: bool = False

    @model_validator(mode="after")
    def _check_heads(self) -> RMSNormDecoderConfig:
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) is not a multiple of num_attention_heads "
                             f"({self.num_attention_heads}), and no head_dim is given")
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

    def _attention(self, qkv_bias: bool = False, o_bias: bool = False, **fields: Any) -> Attention:
        return Attention(heads=self.num_attention_heads, kv_heads=self.kv_heads, head_dim=self.attention_head_dim,
                         qkv_bias=qkv_bias, o_bias=o_bias, **fields)

    def _decoder(self, mixer: Mixer, mlp: FeedForward, **fields: Any) -> Decoder:
        """num_hidden_layers identical layers of `mixer` and `mlp`, RMSNorms, embed_tokens and lm_head."""
        return Decoder(hidden=self.hidden_size, vocab=self.vocab_size,
                       layers=uniform(Layer(mixer=mixer, mlp=mlp), self.num_hidden_layers),
                       tie_word_embeddings=self.tie_word_embeddings, **fields)

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
            hidden_act=self.hidden_act,
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

    def decoder(self) -> Decoder:
        """LlamaForCausalLM (modeling_llama.py).

        P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 d) + d   (+ V d if untied;
        + (h + 2 k) h_d + d per layer with attention_bias, + 2 I + d with mlp_bias)
        """
        attention = self._attention(self.attention_bias, self.attention_bias)
        return self._decoder(attention, MLP(inner=self.intermediate_size, bias=self.mlp_bias))



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

    def decoder(self) -> Decoder:
        """MistralForCausalLM (modeling_mistral.py): the Llama formula without biases."""
        return self._decoder(self._attention(), MLP(inner=self.intermediate_size))

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

    def decoder(self) -> Decoder:
        """MixtralForCausalLM (modeling_mixtral.py): Mistral attention; per layer a router (E d) and E SwiGLU
        experts (3 d I each), all experts of a layer one module under transformers >= 5.

        P = V d + L (d (h + 2 k) h_d + h h_d d + E d + 3 E d I + 2 d) + d   (+ V d if untied)
        """
        moe = MoE(experts=self.num_local_experts, top_k=self.num_experts_per_tok, inner=self.intermediate_size)
        return self._decoder(self._attention(), moe)

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

    def decoder(self) -> Decoder:
        """Qwen2ForCausalLM (modeling_qwen2.py): the Llama formula plus q, k, v biases, (h + 2 k) h_d per layer."""
        return self._decoder(self._attention(qkv_bias=True), MLP(inner=self.intermediate_size))

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
    # Gemma2Config has no hidden_act, but published config.json files carry one beside hidden_activation (the
    # value transformers keeps as an unused attribute): accepted, never read. Gemma2MLP reads hidden_activation.
    hidden_act: str | None = None
    UNUSED_ACTIVATION_KEYS: ClassVar[frozenset[str]] = frozenset({"hidden_act"})
    hidden_activation: str = "gelu_pytorch_tanh"

    def decoder(self) -> Decoder:
        """Gemma2ForCausalLM (modeling_gemma2.py): the Llama formula with 4 norms per layer and h_d from the config.

        P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 4 d) + d   (tied head by default)
        """
        attention = self._attention(self.attention_bias, self.attention_bias)
        return self._decoder(attention, MLP(inner=self.intermediate_size), layer_norms=SANDWICH_NORMS,
                             norm_position="sandwich")

    def architecture(self) -> Architecture:
        return self._architecture(
            hidden_act=self.hidden_activation,
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

    def decoder(self) -> Decoder:
        """Phi3ForCausalLM (modeling_phi3.py): the Llama formula with fused qkv_proj and gate_up_proj (same count)."""
        return self._decoder(self._attention(fused="qkv_proj"), MLP(inner=self.intermediate_size, fused="gate_up_proj"))

    def architecture(self) -> Architecture:
        return self._architecture(sliding_window=self.sliding_window, dropout=self.resid_pdrop,
                                  hidden_act=self.hidden_act)
