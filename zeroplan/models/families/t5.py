"""T5 (encoder-decoder): `T5Config` keys and defaults, as `T5ForConditionalGeneration` builds them.

Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import NonNegativeFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.families.base import FamilyConfig, check_activation

T5_DECODER_NORMS_PER_LAYER = 3  # T5Block in the decoder: self-attention, cross-attention and FF layer norms
GATED_PREFIX = "gated-"  # feed_forward_proj "gated-gelu" -> T5DenseGatedActDense (wi_0, wi_1, wo)


class T5Config(FamilyConfig):
    """T5 and T5 v1.1 / Flan-T5 (`T5Config`, defaults = t5-small).

    tie_word_embeddings is not a T5Config field but the PretrainedConfig default, True: the original
    T5 shares `shared` with the LM head; T5 v1.1 configs say false and have their own `lm_head`.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("d_model", "num_layers", "num_heads")

    model_type: Literal["t5"]
    vocab_size: PositiveInt = 32128
    d_model: PositiveInt = 512
    d_kv: PositiveInt = 64
    d_ff: PositiveInt = 2048
    num_layers: PositiveInt = 6
    num_decoder_layers: PositiveInt | None = None
    num_heads: PositiveInt = 8
    relative_attention_num_buckets: PositiveInt = 32
    feed_forward_proj: str = "relu"
    dropout_rate: NonNegativeFloat = 0.1
    tie_word_embeddings: bool = True

    @model_validator(mode="after")
    def _check_feed_forward_proj(self) -> T5Config:
        # Same rule as T5Config.validate_architecture: "{act}" or "gated-{act}".
        parts = self.feed_forward_proj.split("-")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
            raise ValueError(
                f"feed_forward_proj ({self.feed_forward_proj!r}) is neither 'ACT' nor 'gated-ACT' (e.g. 'gated-gelu')"
            )
        check_activation("feed_forward_proj", self.dense_act_fn)
        return self

    @property
    def decoder_layers(self) -> int:
        """num_decoder_layers, defaulting to num_layers (a symmetric encoder-decoder)."""
        return self.num_decoder_layers or self.num_layers

    @property
    def is_gated(self) -> bool:
        return self.feed_forward_proj.startswith(GATED_PREFIX)

    @property
    def dense_act_fn(self) -> str:
        """T5Config.__post_init__: the activation after the optional 'gated-'; 'gated-gelu' means gelu_new."""
        return "gelu_new" if self.feed_forward_proj == "gated-gelu" else self.feed_forward_proj.split("-")[-1]

    def architecture(self) -> Architecture:
        return Architecture(
            family=self.model_type,
            hidden_act=self.dense_act_fn,
            hidden_size=self.d_model,
            num_layers=self.decoder_layers,
            num_encoder_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_heads,
            head_dim=self.d_kv,
            intermediate_size=self.d_ff,
            vocab_size=self.vocab_size,
            gated_mlp=self.is_gated,
            norm="rmsnorm",  # T5LayerNorm: scale only, no mean subtraction, no bias
            norms_per_layer=T5_DECODER_NORMS_PER_LAYER,
            tie_word_embeddings=self.tie_word_embeddings,
            dropout=self.dropout_rate,
            attention_dropout=self.dropout_rate,
        )
