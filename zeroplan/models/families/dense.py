"""Dense decoders of 2024-26 on the Llama pattern: Qwen3, Gemma (v1), Gemma 3, GLM-4, OLMo 2, OLMo 3, Granite, SmolLM3.

Keys and defaults are those of the transformers 5.x config classes (configuration_<family>.py), the layer types
as their `__post_init__` derives them; the modules are those of modeling_<family>.py, as a block description
(zeroplan.models.block). Every q/k/v/o projection takes `attention_bias` unless a docstring says otherwise, and
head_dim defaults to hidden_size // num_attention_heads (`getattr(config, "head_dim", ...)` in the attention).
Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLP, Attention, Decoder, Layer, runs
from zeroplan.models.families.base import check_divides, check_layer_count, decoder_architecture
from zeroplan.models.families.rmsnorm import SANDWICH_NORMS, RMSNormDecoderConfig

FULL, SLIDING = "full_attention", "sliding_attention"
POST_NORMS = ("post_attention_layernorm", "post_feedforward_layernorm")  # OLMo 2/3: after attention and MLP only
GLM4_NORMS = ("input_layernorm", "post_attention_layernorm", "post_self_attn_layernorm", "post_mlp_layernorm")
OLMO3_FULL_EVERY = 4  # Olmo3Config: every 4th layer is full attention, the others slide
GEMMA3_PATTERN = 6  # Gemma3TextConfig: sliding_window_pattern's default, every 6th layer global


LayerTypes = list[Literal["full_attention", "sliding_attention"]] | None


class _LayerTyped(RMSNormDecoderConfig):
    """A Llama-pattern family whose layers may have types. Only the families whose config class has them declare
    `layer_types` and `sliding_window` (Qwen3, Gemma 3, OLMo 3, SmolLM3) and `mlp_bias` (Granite, SmolLM3): a key
    the config class does not have is one this family ignores in a config.json."""

    attention_bias: bool = False

    @model_validator(mode="after")
    def _check_layer_types(self) -> _LayerTyped:
        check_layer_count("num_hidden_layers", self.num_hidden_layers)
        given = getattr(self, "layer_types", None)
        if given is not None and len(given) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(given)} entries, num_hidden_layers is {self.num_hidden_layers}")
        return self

    def default_layer_types(self) -> list[str]:
        return [FULL] * self.num_hidden_layers

    def types(self) -> list[str]:
        given = getattr(self, "layer_types", None)
        return list(given) if given is not None else self.default_layer_types()

    def rope_layers(self) -> list[bool]:
        return [True] * self.num_hidden_layers

    def window(self) -> int | None:
        """The sliding layers' window (None when no layer slides)."""
        return getattr(self, "sliding_window", None) if SLIDING in self.types() else None

    def attention(self) -> Attention:
        return self._attention(self.attention_bias, self.attention_bias)

    def mlp(self) -> MLP:
        return MLP(inner=self.intermediate_size, bias=getattr(self, "mlp_bias", False))

    def _typed(self, **fields: Any) -> Decoder:
        mixer, mlp = self.attention(), self.mlp()
        per_layer = zip(self.types(), self.rope_layers(), strict=True)
        layers = [Layer(mixer=mixer, mlp=mlp, attention_type=t, rope=r) for t, r in per_layer]
        return Decoder(hidden=self.hidden_size, vocab=self.vocab_size, layers=runs(layers),
                       tie_word_embeddings=self.tie_word_embeddings, **fields)

    def decoder(self) -> Decoder:
        return self._typed()

    def architecture(self) -> Architecture:
        return self._arch()

    def _arch(self, **fields: Any) -> Architecture:
        facts = dict(hidden_act=self.hidden_act, sliding_window=self.window(), attention_dropout=self.attention_dropout)
        return decoder_architecture(self.model_type, self.decoder(), **(facts | fields))


class Qwen3Config(_LayerTyped):
    """Qwen3 (`Qwen3Config`, modeling_qwen3.py): Llama with a per-head RMSNorm on q and k (q_norm, k_norm of h_d).

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 h_d + 2 d) + d   (+ V d if untied; + (h + 2 k) h_d + d
    per layer with attention_bias). Layers from max_window_layers on slide, and only with use_sliding_window.
    """

    model_type: Literal["qwen3"]
    vocab_size: PositiveInt = 151936
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 22016
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 32
    head_dim: PositiveInt | None = 128
    max_position_embeddings: PositiveInt = 32768
    use_sliding_window: bool = False
    sliding_window: PositiveInt | None = 4096
    max_window_layers: NonNegativeInt = 28
    layer_types: LayerTypes = None

    def default_layer_types(self) -> list[str]:
        slides = self.use_sliding_window and self.sliding_window is not None
        return [SLIDING if slides and i >= self.max_window_layers else FULL for i in range(self.num_hidden_layers)]

    def window(self) -> int | None:
        return self.sliding_window if self.use_sliding_window and SLIDING in self.types() else None

    def attention(self) -> Attention:
        return self._attention(self.attention_bias, self.attention_bias, qk_norm="head")


class GemmaConfig(_LayerTyped):
    """Gemma v1 (`GemmaConfig`, modeling_gemma.py, defaults = gemma-7b): Llama with h_d = 256 and a tied head.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 d) + d
    """

    model_type: Literal["gemma"]
    vocab_size: PositiveInt = 256000
    hidden_size: PositiveInt = 3072
    intermediate_size: PositiveInt = 24576
    num_hidden_layers: PositiveInt = 28
    num_attention_heads: PositiveInt = 16
    num_key_value_heads: PositiveInt | None = 16
    head_dim: PositiveInt | None = 256
    max_position_embeddings: PositiveInt = 8192
    hidden_act: str | None = "gelu_pytorch_tanh"
    tie_word_embeddings: bool = True


class Gemma3TextConfig(_LayerTyped):
    """Gemma 3's language model (`Gemma3TextConfig`, modeling_gemma3.py, defaults = gemma-3-4b's text model).

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 h_d + 4 d) + d   (tied head; vocab_size defaults to 262,208)
    Sandwich norms (4 per layer), a per-head q/k norm; every sliding_window_pattern-th layer global.
    """

    model_type: Literal["gemma3_text"]
    vocab_size: PositiveInt = 262_208
    hidden_size: PositiveInt = 2304
    intermediate_size: PositiveInt = 9216
    num_hidden_layers: PositiveInt = 26
    num_attention_heads: PositiveInt = 8
    num_key_value_heads: PositiveInt | None = 4
    head_dim: PositiveInt | None = 256
    max_position_embeddings: PositiveInt = 131_072
    # Gemma3TextConfig has no hidden_act (Gemma3MLP reads hidden_activation); a config.json may carry one beside
    # it, as Gemma 2's do: accepted, never read.
    hidden_act: str | None = None
    UNUSED_ACTIVATION_KEYS: ClassVar[frozenset[str]] = frozenset({"hidden_act"})
    hidden_activation: str = "gelu_pytorch_tanh"
    tie_word_embeddings: bool = True
    sliding_window: PositiveInt | None = 4096
    layer_types: LayerTypes = None
    sliding_window_pattern: PositiveInt = GEMMA3_PATTERN  # popped from kwargs by Gemma3TextConfig
    use_bidirectional_attention: bool | None = False
    attn_logit_softcapping: PositiveFloat | None = None
    final_logit_softcapping: PositiveFloat | None = None

    @model_validator(mode="after")
    def _check_hidden(self) -> Gemma3TextConfig:
        # Gemma3TextConfig.validate_architecture checks this even when head_dim is given.
        check_divides("num_attention_heads", self.num_attention_heads, "hidden_size", self.hidden_size)
        return self

    def default_layer_types(self) -> list[str]:
        return [SLIDING if (i + 1) % self.sliding_window_pattern else FULL for i in range(self.num_hidden_layers)]

    def window(self) -> int | None:
        if self.sliding_window is None or SLIDING not in self.types():
            return None
        # Gemma3TextConfig.__post_init__: a bidirectional model's window is halved (exclusive bounds).
        return self.sliding_window // 2 + 1 if self.use_bidirectional_attention else self.sliding_window

    def attention(self) -> Attention:
        return self._attention(self.attention_bias, self.attention_bias, qk_norm="head")

    def decoder(self) -> Decoder:
        return self._typed(layer_norms=SANDWICH_NORMS, norm_position="sandwich")

    def architecture(self) -> Architecture:
        return self._arch(hidden_act=self.hidden_activation, attn_logit_softcapping=self.attn_logit_softcapping,
                          final_logit_softcapping=self.final_logit_softcapping)


class Glm4Config(_LayerTyped):
    """GLM-4 (`Glm4Config`, modeling_glm4.py, defaults = glm-4-9b): q/k/v biases (o_proj none), a fused
    gate_up_proj, and four norms per layer (after attention and after the MLP as well).

    P = V d + L (d (h + 2 k) h_d + (h + 2 k) h_d + h h_d d + 3 d I + 4 d) + d   (+ V d if untied)
    """

    model_type: Literal["glm4"]
    vocab_size: PositiveInt = 151552
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 13696
    num_hidden_layers: PositiveInt = 40
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 2
    head_dim: PositiveInt | None = 128
    max_position_embeddings: PositiveInt = 131072
    attention_bias: bool = True

    def attention(self) -> Attention:
        return self._attention(qkv_bias=self.attention_bias, o_bias=False)

    def mlp(self) -> MLP:
        return MLP(inner=self.intermediate_size, fused="gate_up_proj")

    def decoder(self) -> Decoder:
        return self._typed(layer_norms=GLM4_NORMS, norm_position="sandwich")


class Olmo2Config(_LayerTyped):
    """OLMo 2 (`Olmo2Config`, modeling_olmo2.py): norms after attention and MLP (none before), and q/k norms over
    all heads (q_norm of h h_d, k_norm of k h_d).

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + (h + k) h_d + 2 d) + d   (+ V d if untied)
    """

    model_type: Literal["olmo2"]
    vocab_size: PositiveInt = 50304
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 11008
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = None
    max_position_embeddings: PositiveInt = 2048

    def attention(self) -> Attention:
        return self._attention(self.attention_bias, self.attention_bias, qk_norm="full")

    def decoder(self) -> Decoder:
        return self._typed(layer_norms=POST_NORMS, norm_position="post")


class Olmo3Config(Olmo2Config):
    """OLMo 3 (`Olmo3Config`, modeling_olmo3.py): OLMo 2's blocks; three sliding layers then one full."""

    model_type: Literal["olmo3"]  # type: ignore[assignment]
    sliding_window: PositiveInt | None = 4096
    layer_types: LayerTypes = None

    def default_layer_types(self) -> list[str]:
        return [SLIDING if (i + 1) % OLMO3_FULL_EVERY else FULL for i in range(self.num_hidden_layers)]


class GraniteConfig(_LayerTyped):
    """Granite 3.x (`GraniteConfig`, modeling_granite.py): Llama's modules; its multipliers scale activations,
    not shapes. P as Llama."""

    model_type: Literal["granite"]
    vocab_size: PositiveInt = 32000
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 11008
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = None
    max_position_embeddings: PositiveInt = 2048
    mlp_bias: bool = False


class SmolLM3Config(_LayerTyped):
    """SmolLM3 (`SmolLM3Config`, modeling_smollm3.py): Llama's modules, a tied head, and NoPE layers: every
    no_rope_layer_interval-th layer skips RoPE (no_rope_layers: 1 = RoPE, 0 = NoPE). P as Llama."""

    model_type: Literal["smollm3"]
    vocab_size: PositiveInt = 128256
    hidden_size: PositiveInt = 2048
    intermediate_size: PositiveInt = 11008
    num_hidden_layers: PositiveInt = 36
    num_attention_heads: PositiveInt = 16
    num_key_value_heads: PositiveInt | None = 4
    max_position_embeddings: PositiveInt = 32768
    tie_word_embeddings: bool = True
    mlp_bias: bool = False
    use_sliding_window: bool = False
    sliding_window: PositiveInt | None = None
    layer_types: LayerTypes = None
    no_rope_layers: list[Literal[0, 1]] | None = None
    no_rope_layer_interval: PositiveInt = 4

    @model_validator(mode="after")
    def _check_no_rope_layers(self) -> SmolLM3Config:
        if self.no_rope_layers is not None and len(self.no_rope_layers) != self.num_hidden_layers:
            raise ValueError(f"no_rope_layers has {len(self.no_rope_layers)} entries, num_hidden_layers is "
                             f"{self.num_hidden_layers}")
        return self

    def rope_layers(self) -> list[bool]:
        if self.no_rope_layers is not None:
            return [bool(flag) for flag in self.no_rope_layers]
        return [(i + 1) % self.no_rope_layer_interval != 0 for i in range(self.num_hidden_layers)]

    def default_layer_types(self) -> list[str]:
        slides = self.use_sliding_window and self.sliding_window is not None
        return [SLIDING if slides and not rope else FULL for rope in self.rope_layers()]
