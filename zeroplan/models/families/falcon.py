"""Falcon (`FalconConfig`, modeling_falcon.py): multi-query or grouped attention, one or two LayerNorms per layer.

Keys and defaults are those of transformers 5.x's configuration_falcon.py. Pure: no rich, typer, yaml or I/O.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import NonNegativeFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLP, Decoder
from zeroplan.models.families.base import FamilyConfig, check_divides
from zeroplan.models.families.layernorm import (
    FALCON_MLP_RATIO,
    PLAIN,
    QKV,
    layernorm_architecture,
    layernorm_decoder,
    mha,
)


class FalconConfig(FamilyConfig):
    """Falcon (`FalconConfig`, defaults = falcon-7b): multi-query or grouped (new architecture) attention."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("num_hidden_layers", "num_attention_heads")

    ALIASES: ClassVar[dict[str, str]] = {"n_embed": "hidden_size"}  # popped from kwargs by FalconConfig

    model_type: Literal["falcon"]
    vocab_size: PositiveInt = 65024
    hidden_size: PositiveInt = 4544
    n_embed: PositiveInt | None = None
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 71
    num_kv_heads: PositiveInt | None = None
    num_ln_in_parallel_attn: PositiveInt | None = None
    new_decoder_architecture: bool = False
    multi_query: bool = True
    parallel_attn: bool = True
    bias: bool = False
    ffn_hidden_size: PositiveInt | None = None
    max_position_embeddings: PositiveInt = 2048
    hidden_dropout: NonNegativeFloat = 0.0
    attention_dropout: NonNegativeFloat = 0.0
    tie_word_embeddings: bool = True

    @model_validator(mode="after")
    def _check_shape(self) -> FalconConfig:
        check_divides("num_attention_heads", self.num_attention_heads, "hidden_size", self.resolved("hidden_size"))
        if self.new_decoder_architecture:
            check_divides("num_kv_heads", self.kv_heads, "num_attention_heads", self.num_attention_heads)
        return self

    @property
    def kv_heads(self) -> int:
        """K/V heads: num_kv_heads (new architecture), 1 (multi-query), else one per query head."""
        if self.new_decoder_architecture:
            return self.num_kv_heads or self.num_attention_heads
        return 1 if self.multi_query else self.num_attention_heads

    @property
    def norms_per_layer(self) -> int:
        """FalconDecoderLayer: two norms unless parallel attention shares one (num_ln_in_parallel_attn)."""
        if not self.parallel_attn:
            return 2
        # FalconDecoderLayer sets num_ln_in_parallel_attn = 2 when it is None and the architecture is new.
        default = 2 if self.new_decoder_architecture else 1
        return 2 if (self.num_ln_in_parallel_attn or default) == 2 else 1

    activation: str = "gelu"

    @property
    def layer_norm_names(self) -> tuple[str, ...]:
        """FalconDecoderLayer: ln_attn and ln_mlp (new architecture, two norms), else input_layernorm
        (+ post_attention_layernorm without parallel attention)."""
        if self.norms_per_layer == 2 and self.new_decoder_architecture:
            return ("ln_attn", "ln_mlp")
        return ("input_layernorm", "post_attention_layernorm")[: self.norms_per_layer]

    def decoder(self) -> Decoder:
        """FalconForCausalLM (modeling_falcon.py).

        P = V d + L (d (h + 2 k) h_d + d^2 + 2 d F + 2 d m) + 2 d   (+ biases with `bias`, + V d if untied)
        (h query heads, k K/V heads, h_d = d / h, F = ffn_hidden_size or 4 d, m LayerNorms per layer)
        """
        d, heads, bias = self.resolved("hidden_size"), self.num_attention_heads, self.bias
        width = (heads + 2 * self.kv_heads) * (d // heads)
        if not (self.new_decoder_architecture or self.multi_query):
            width = QKV * d  # FalconAttention: the classic fused projection, whatever num_kv_heads says
        attention = mha(heads, d, kv_heads=self.kv_heads, prefix="self_attention", fused="query_key_value",
                         fused_width=width, qkv_bias=bias, o_bias=bias, names=("", "", "", "dense"))
        mlp = MLP(inner=self.ffn_hidden_size or FALCON_MLP_RATIO * d, gated=False, bias=bias, names=PLAIN)
        return layernorm_decoder(self.num_hidden_layers, attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, body="transformer", stack="h",
                                  embed="word_embeddings", final_norm="ln_f", layer_norms=self.layer_norm_names,
                                  parallel=self.new_decoder_architecture or self.parallel_attn)

    def architecture(self) -> Architecture:
        hidden = self.resolved("hidden_size")
        return layernorm_architecture(
            self,
            hidden,
            self.num_attention_heads,
            hidden_act=self.activation,
            num_key_value_heads=self.kv_heads,
            num_layers=self.num_hidden_layers,
            intermediate_size=self.ffn_hidden_size or FALCON_MLP_RATIO * hidden,
            norms_per_layer=self.norms_per_layer,
            parallel_attn=self.new_decoder_architecture or self.parallel_attn,
            dropout=self.hidden_dropout,
            attention_dropout=self.attention_dropout,
        )
