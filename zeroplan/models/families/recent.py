"""Dense decoders of 2025-26 read by transformers 5.25: Seed-OSS, ERNIE 4.5, Ministral 3, EXAONE 4, StarCoder2, Phi
(1/1.5/2), Cohere (Command R) and Cohere 2 (Command R7B / A), and Qwen3-VL's language model.

Keys and defaults are those of the transformers config classes (transformers==5.25.0:
models/<family>/configuration_<family>.py), the modules those of modeling_<family>.py, as a block description
(zeroplan.models.block); each decoder() docstring gives P. Reference counts: validation/hf_reference (variants/ and
configs/, built on the meta device by count.py). Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Literal

from pydantic import NonNegativeFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLP, Attention, Decoder
from zeroplan.models.families.dense import FULL, POST_NORMS, SLIDING, LayerTypes, _LayerTyped

COHERE_PATTERN = 4  # Cohere2Config.__post_init__ pops sliding_window_pattern, default 4: every 4th layer full
EXAONE4_PATTERN = 4  # Exaone4Config.sliding_window_pattern's default
PARALLEL_NORMS = ("input_layernorm",)  # one norm before attention and MLP, which read the same input (Cohere, Phi)


def every_nth_full(layers: int, pattern: int) -> list[str]:
    """Layer i slides unless (i + 1) is a multiple of `pattern` (Cohere2Config, Exaone4Config __post_init__)."""
    return [SLIDING if (i + 1) % pattern else FULL for i in range(layers)]


class SeedOssConfig(_LayerTyped):
    """Seed-OSS (`SeedOssConfig`, modeling_seed_oss.py, defaults = Seed-OSS-36B): Llama with q/k/v biases
    (attention_bias) apart from the output's (attention_out_bias), residual dropout after attention and MLP.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 d) + d (+ V d if untied; + (h + 2 k) h_d with attention_bias,
    + d with attention_out_bias, + 2 I + d with mlp_bias)
    """

    model_type: Literal["seed_oss"]
    vocab_size: PositiveInt = 155136
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 27648
    num_hidden_layers: PositiveInt = 64
    num_attention_heads: PositiveInt = 80
    num_key_value_heads: PositiveInt | None = 8
    head_dim: PositiveInt | None = 128
    max_position_embeddings: PositiveInt = 524288
    attention_bias: bool = True
    attention_out_bias: bool = False
    mlp_bias: bool = False
    attention_dropout: NonNegativeFloat = 0.1
    residual_dropout: NonNegativeFloat = 0.1

    def attention(self) -> Attention:
        return self._attention(self.attention_bias, self.attention_out_bias)

    def architecture(self) -> Architecture:
        return self._arch(dropout=self.residual_dropout)


class Ernie4_5Config(_LayerTyped):  # noqa: N801  (transformers' class name)
    """ERNIE 4.5 dense (`Ernie4_5Config`, modeling_ernie4_5.py, defaults = ERNIE-4.5-0.3B): Llama whose q/k/v/o and
    MLP take `use_bias`; tied head by default.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 d) + d (+ V d if untied; + (h + 2 k) h_d + d + 2 I + d
    per layer with use_bias)
    """

    model_type: Literal["ernie4_5"]
    vocab_size: PositiveInt = 103424
    hidden_size: PositiveInt = 1024
    intermediate_size: PositiveInt = 3072
    num_hidden_layers: PositiveInt = 18
    num_attention_heads: PositiveInt = 16
    num_key_value_heads: PositiveInt | None = 2
    head_dim: PositiveInt | None = 128
    max_position_embeddings: PositiveInt = 131072
    tie_word_embeddings: bool = True
    use_bias: bool = False

    def attention(self) -> Attention:
        return self._attention(self.use_bias, self.use_bias)

    def mlp(self) -> MLP:
        return MLP(inner=self.intermediate_size, bias=self.use_bias)


class Ministral3Config(_LayerTyped):
    """Ministral 3 / Mistral 3 language model (`Ministral3Config`, modeling_ministral3.py, defaults = Ministral-3
    8B): Mistral's modules, head_dim its own width.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 d) + d (+ V d if untied)
    """

    model_type: Literal["ministral3"]
    vocab_size: PositiveInt = 131072
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 14336
    num_hidden_layers: PositiveInt = 34
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 8
    head_dim: PositiveInt | None = 128
    max_position_embeddings: PositiveInt = 262144
    sliding_window: PositiveInt | None = None

    def window(self) -> int | None:
        return self.sliding_window


class Exaone4Config(_LayerTyped):
    """EXAONE 4.0 (`Exaone4Config`, modeling_exaone4.py): norms after attention and MLP only (as OLMo 2), a per-head
    q/k RMSNorm, three sliding layers then one full (sliding_window_pattern); the full layers are NoPE when a window
    is set (Exaone4Attention applies RoPE only with no window or on a sliding layer).

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 h_d + 2 d) + d (+ V d if untied)
    """

    model_type: Literal["exaone4"]
    vocab_size: PositiveInt = 102400
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 16384
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 32
    max_position_embeddings: PositiveInt = 2048
    sliding_window: PositiveInt | None = 4096
    sliding_window_pattern: PositiveInt | str | None = EXAONE4_PATTERN
    layer_types: LayerTypes = None

    @model_validator(mode="after")
    def _check_pattern(self) -> Exaone4Config:
        # Exaone4Config.__post_init__ derives layer_types from an integer pattern, which a null window sets to 0
        # (a division by zero there): without layer_types both must be usable.
        if self.layer_types is None and (self.sliding_window is None or not isinstance(self.sliding_window_pattern,
                                                                                       int)):
            raise ValueError(f"layer_types missing with sliding_window {self.sliding_window!r} and "
                             f"sliding_window_pattern {self.sliding_window_pattern!r}: transformers cannot derive them")
        return self

    def default_layer_types(self) -> list[str]:
        return every_nth_full(self.num_hidden_layers, self.sliding_window_pattern)

    def rope_layers(self) -> list[bool]:
        return [self.sliding_window is None or t == SLIDING for t in self.types()]

    def attention(self) -> Attention:
        return self._attention(qk_norm="head")

    def decoder(self) -> Decoder:
        return self._typed(layer_norms=POST_NORMS, norm_position="post")


class Starcoder2Config(_LayerTyped):
    """StarCoder2 (`Starcoder2Config`, modeling_starcoder2.py, defaults = starcoder2-7b): LayerNorms with biases, a
    plain MLP c_fc -> c_proj, biases on every linear with use_bias, a tied head.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 2 d I + 4 d) + 2 d (+ V d if untied; + (h + 2 k) h_d + d + I + d per
    layer with use_bias)
    """

    model_type: Literal["starcoder2"]
    vocab_size: PositiveInt = 49152
    hidden_size: PositiveInt = 3072
    intermediate_size: PositiveInt = 12288
    num_hidden_layers: PositiveInt = 30
    num_attention_heads: PositiveInt = 24
    num_key_value_heads: PositiveInt | None = 2
    max_position_embeddings: PositiveInt = 4096
    hidden_act: str | None = "gelu_pytorch_tanh"
    sliding_window: PositiveInt | None = None
    residual_dropout: NonNegativeFloat = 0.0
    embedding_dropout: NonNegativeFloat = 0.0
    use_bias: bool = True
    tie_word_embeddings: bool = True

    def attention(self) -> Attention:
        return self._attention(self.use_bias, self.use_bias)

    def mlp(self) -> MLP:
        return MLP(inner=self.intermediate_size, gated=False, bias=self.use_bias, names=("", "c_fc", "c_proj"))

    def window(self) -> int | None:
        return self.sliding_window

    def decoder(self) -> Decoder:
        return self._typed(norm="layernorm", norm_bias=True)

    def architecture(self) -> Architecture:
        return self._arch(dropout=self.residual_dropout)


class PhiConfig(_LayerTyped):
    """Phi-1/1.5/2 (`PhiConfig`, modeling_phi.py, defaults = phi-1.5 shape): one LayerNorm, attention and MLP in
    parallel on it, biased q/k/v and `dense`, MLP fc1 -> fc2 with biases, `final_layernorm`, an LM head with a bias;
    with qk_layernorm a LayerNorm of h_d on q and k (q_layernorm, k_layernorm).

    P = V d + L (d (h + 2 k) h_d + (h + 2 k) h_d + h h_d d + d + 2 d I + I + d + 2 d) + 2 d + V d + V
    (+ 4 h_d per layer with qk_layernorm)
    """

    model_type: Literal["phi"]
    vocab_size: PositiveInt = 51200
    hidden_size: PositiveInt = 2048
    intermediate_size: PositiveInt = 8192
    num_hidden_layers: PositiveInt = 24
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = None
    max_position_embeddings: PositiveInt = 2048
    hidden_act: str | None = "gelu_new"
    resid_pdrop: NonNegativeFloat = 0.0
    embd_pdrop: NonNegativeFloat = 0.0
    qk_layernorm: bool = False

    def attention(self) -> Attention:
        return self._attention(True, True, names=("q_proj", "k_proj", "v_proj", "dense"),
                               qk_norm="head" if self.qk_layernorm else "none",
                               qk_norm_names=("q_layernorm", "k_layernorm"))

    def mlp(self) -> MLP:
        return MLP(inner=self.intermediate_size, gated=False, bias=True, names=("", "fc1", "fc2"))

    def decoder(self) -> Decoder:
        return self._typed(norm="layernorm", norm_bias=True, layer_norms=PARALLEL_NORMS, parallel=True,
                           final_norm="final_layernorm", lm_head_bias=True)

    def architecture(self) -> Architecture:
        return self._arch(dropout=self.resid_pdrop)


class CohereConfig(_LayerTyped):
    """Cohere Command R (`CohereConfig`, modeling_cohere.py, defaults = c4ai-command-r-v01): one LayerNorm without
    bias (CohereLayerNorm), attention and MLP in parallel on it, a tied head; with use_qk_norm a LayerNorm of
    (heads, h_d) on q and k, one weight row per head.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + d) + d (+ (h + 2 k) h_d + d per layer with attention_bias,
    + (h + k) h_d with use_qk_norm)
    """

    model_type: Literal["cohere"]
    vocab_size: PositiveInt = 256000
    hidden_size: PositiveInt = 8192
    intermediate_size: PositiveInt = 22528
    num_hidden_layers: PositiveInt = 40
    num_attention_heads: PositiveInt = 64
    num_key_value_heads: PositiveInt | None = 64
    max_position_embeddings: PositiveInt = 8192
    tie_word_embeddings: bool = True
    use_qk_norm: bool = False

    def attention(self) -> Attention:
        return self._attention(self.attention_bias, self.attention_bias,
                               qk_norm="head" if self.use_qk_norm else "none", qk_norm_stacked=True)

    def decoder(self) -> Decoder:
        return self._typed(norm="layernorm", layer_norms=PARALLEL_NORMS, parallel=True)


class Cohere2Config(CohereConfig):
    """Cohere 2 (`Cohere2Config`, modeling_cohere2.py, Command R7B / Command A): Cohere's modules without q/k norms,
    three sliding layers then one full; the full layers are NoPE (Cohere2Attention applies RoPE with a window only).

    P = the Cohere formula without use_qk_norm
    """

    model_type: Literal["cohere2"]  # type: ignore[assignment]
    head_dim: PositiveInt | None = 128
    sliding_window: PositiveInt | None = 4096
    layer_types: LayerTypes = None
    use_qk_norm: Literal[False] = False  # no Cohere2Config key: Cohere2Attention has no q/k norms

    def default_layer_types(self) -> list[str]:
        return every_nth_full(self.num_hidden_layers, COHERE_PATTERN)

    def rope_layers(self) -> list[bool]:
        return [t == SLIDING for t in self.types()]


class Qwen3VLTextConfig(_LayerTyped):
    """Qwen3-VL's language model (`Qwen3VLTextConfig`, modeling_qwen3_vl.py Qwen3VLTextModel): Qwen3's modules
    (per-head q/k RMSNorm); the LM head is `Qwen3VLForConditionalGeneration.lm_head`, tied when the outer config
    says so (its tie_word_embeddings, read by MultimodalConfig).

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 h_d + 2 d) + d (+ V d if untied)
    """

    model_type: Literal["qwen3_vl_text"]
    vocab_size: PositiveInt = 151936
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 22016
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = 32
    head_dim: PositiveInt | None = 128
    max_position_embeddings: PositiveInt = 128000

    def attention(self) -> Attention:
        return self._attention(self.attention_bias, self.attention_bias, qk_norm="head")
