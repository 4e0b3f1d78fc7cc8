"""LayerNorm decoder families: GPT-2, GPT-NeoX, OPT, BLOOM (Falcon and GPT-J: falcon.py, gptj.py).

Keys and defaults are those of the transformers config classes (configuration_<family>.py,
transformers 5.x); only keys that change the parameter count or the Architecture are modelled.
Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import LINEAR, MLP, NORM, Attention, Decoder, Extra, Layer, uniform
from zeroplan.models.families.base import FamilyConfig, check_divides

GPT2_MLP_RATIO = 4  # GPT2MLP inner width when n_inner is None (modeling_gpt2.py: 4 * hidden_size)
BLOOM_MLP_RATIO = 4  # BloomMLP: dense_h_to_4h is 4 * hidden_size wide, no config key
FALCON_MLP_RATIO = 4  # FalconConfig: ffn_hidden_size defaults to 4 * hidden_size
OPT_POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding keeps 2 extra rows (padding offset, fairseq legacy)
QKV = 3  # fused query, key and value projections (GPT-2 c_attn, NeoX/BLOOM query_key_value)


PLAIN = ("", "dense_h_to_4h", "dense_4h_to_h")  # an ungated MLP's (gate, up, down) names in NeoX, BLOOM, Falcon


def mha(heads: int, hidden: int, **fields: Any) -> Attention:
    """Multi-head attention of width d: heads of d / h."""
    return Attention(heads=heads, kv_heads=fields.pop("kv_heads", heads), head_dim=hidden // heads, **fields)


def layernorm_decoder(layers: int, attention: Attention, mlp: MLP, **fields: Any) -> Decoder:
    return Decoder(layers=uniform(Layer(mixer=attention, mlp=mlp), layers), norm="layernorm", norm_bias=True,
                   **fields)


def layernorm_architecture(config: FamilyConfig, hidden: int, heads: int, **fields: Any) -> Architecture:
    """A LayerNorm decoder with a plain (ungated) MLP; one K/V head per query head unless given."""
    fields.setdefault("num_key_value_heads", heads)
    return Architecture(
        family=config.model_type,
        hidden_size=hidden,
        num_attention_heads=heads,
        head_dim=hidden // heads,
        vocab_size=config.vocab_size,
        gated_mlp=False,
        norm="layernorm",
        tie_word_embeddings=config.tie_word_embeddings,
        **fields,
    )


class GPT2Config(FamilyConfig):
    """GPT-2 (`GPT2Config`): learned positions, fused QKV Conv1D, tied LM head."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("n_embd", "n_layer", "n_head")

    model_type: Literal["gpt2"]
    vocab_size: PositiveInt = 50257
    n_positions: PositiveInt = 1024
    n_embd: PositiveInt = 768
    n_layer: PositiveInt = 12
    n_head: PositiveInt = 12
    n_inner: PositiveInt | None = None
    resid_pdrop: NonNegativeFloat = 0.1
    embd_pdrop: NonNegativeFloat = 0.1
    attn_pdrop: NonNegativeFloat = 0.1
    tie_word_embeddings: bool = True

    @model_validator(mode="after")
    def _check_shape(self) -> GPT2Config:
        check_divides("n_head", self.n_head, "n_embd", self.n_embd)
        return self

    @property
    def inner_size(self) -> int:
        return self.n_inner or GPT2_MLP_RATIO * self.n_embd

    activation_function: str = "gelu_new"

    def decoder(self) -> Decoder:
        """GPT2LMHeadModel (modeling_gpt2.py): Conv1D projections with biases, learned positions.

        P = V d + n_pos d + L (4 d^2 + 2 d I + 9 d + I) + 2 d   (I = n_inner or 4 d; + V d if untied)
        """
        d = self.n_embd
        attention = mha(self.n_head, d, prefix="attn", fused="c_attn", fused_width=QKV * d, qkv_bias=True,
                         o_bias=True, names=("", "", "", "c_proj"), conv1d=True)
        mlp = MLP(inner=self.inner_size, gated=False, bias=True, names=("", "c_fc", "c_proj"), conv1d=True)
        return layernorm_decoder(self.n_layer, attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, positions=self.n_positions,
                                  body="transformer", stack="h", embed="wte", position_name="wpe",
                                  layer_norms=("ln_1", "ln_2"), final_norm="ln_f")

    def architecture(self) -> Architecture:
        return layernorm_architecture(
            self,
            self.n_embd,
            self.n_head,
            hidden_act=self.activation_function,
            num_layers=self.n_layer,
            intermediate_size=self.inner_size,
            learned_positions=self.n_positions,
            dropout=self.resid_pdrop,
            attention_dropout=self.attn_pdrop,
        )


class GPTNeoXConfig(FamilyConfig):
    """GPT-NeoX (`GPTNeoXConfig`, defaults = gpt-neox-20b): rotary, parallel residual, untied head."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("hidden_size", "num_hidden_layers", "num_attention_heads")

    model_type: Literal["gpt_neox"]
    vocab_size: PositiveInt = 50432
    hidden_size: PositiveInt = 6144
    num_hidden_layers: PositiveInt = 44
    num_attention_heads: PositiveInt = 64
    intermediate_size: PositiveInt = 24576
    max_position_embeddings: PositiveInt = 2048
    use_parallel_residual: bool = True
    attention_bias: bool = True
    hidden_dropout: NonNegativeFloat = 0.0
    attention_dropout: NonNegativeFloat = 0.0
    tie_word_embeddings: bool = False
    hidden_act: str = "gelu"

    @model_validator(mode="after")
    def _check_shape(self) -> GPTNeoXConfig:
        check_divides("num_attention_heads", self.num_attention_heads, "hidden_size", self.hidden_size)
        return self

    def decoder(self) -> Decoder:
        """GPTNeoXForCausalLM (modeling_gpt_neox.py): fused query_key_value, an untied head named lm_head (transformers 5;
        conversion_mapping.py renames a checkpoint's embed_out to it).

        P = 2 V d + L (4 d^2 + 2 d I + 9 d + I) + 2 d   (attention_bias; 4 d fewer per layer without)
        """
        d, bias = self.hidden_size, self.attention_bias
        attention = mha(self.num_attention_heads, d, prefix="attention", fused="query_key_value",
                         fused_width=QKV * d, qkv_bias=bias, o_bias=bias, names=("", "", "", "dense"))
        mlp = MLP(inner=self.intermediate_size, gated=False, bias=True, names=PLAIN)
        return layernorm_decoder(self.num_hidden_layers, attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, parallel=self.use_parallel_residual,
                                  body="gpt_neox", embed="embed_in", final_norm="final_layer_norm", head="lm_head")

    def architecture(self) -> Architecture:
        return layernorm_architecture(
            self,
            self.hidden_size,
            self.num_attention_heads,
            hidden_act=self.hidden_act,
            num_layers=self.num_hidden_layers,
            intermediate_size=self.intermediate_size,
            parallel_attn=self.use_parallel_residual,
            dropout=self.hidden_dropout,
            attention_dropout=self.attention_dropout,
        )


class OPTConfig(FamilyConfig):
    """OPT (`OPTConfig`): learned positions (+2 rows), optional word-embedding projection, tied head."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("hidden_size", "num_hidden_layers", "num_attention_heads")

    model_type: Literal["opt"]
    vocab_size: PositiveInt = 50272
    hidden_size: PositiveInt = 768
    num_hidden_layers: PositiveInt = 12
    ffn_dim: PositiveInt = 3072
    max_position_embeddings: PositiveInt = 2048
    do_layer_norm_before: bool = True
    remove_final_layer_norm: bool = Field(False, alias="_remove_final_layer_norm")
    word_embed_proj_dim: PositiveInt | None = None
    num_attention_heads: PositiveInt = 12
    enable_bias: bool = True
    layer_norm_elementwise_affine: bool = True
    dropout: NonNegativeFloat = 0.1
    attention_dropout: NonNegativeFloat = 0.0
    tie_word_embeddings: bool = True
    activation_function: str = "relu"

    def decoder(self) -> Decoder:
        """OPTForCausalLM (modeling_opt.py).

        P = V e + (n_pos + 2) d + [2 d e if e != d] + L (4 d^2 + 2 d F + 9 d + F) + 2 d
        (e = word_embed_proj_dim; biases with enable_bias, norm weights with layer_norm_elementwise_affine;
        the final norm only with do_layer_norm_before)
        """
        d, e, bias = self.hidden_size, self.embed_dim, self.enable_bias
        attention = mha(self.num_attention_heads, d, qkv_bias=bias, o_bias=bias,
                         names=("q_proj", "k_proj", "v_proj", "out_proj"))
        mlp = MLP(inner=self.ffn_dim, gated=False, bias=bias, prefix="", names=("", "fc1", "fc2"))
        projections = (
            Extra(name="project_out", shapes=((e, d),), kind=LINEAR, in_features=d, out_features=e),
            Extra(name="project_in", shapes=((d, e),), kind=LINEAR, in_features=e, out_features=d),
        ) if e != d else ()
        final = self.do_layer_norm_before and not self.remove_final_layer_norm
        return layernorm_decoder(
            self.num_hidden_layers, attention, mlp, hidden=d, vocab=self.vocab_size, embed_width=e,
            tie_word_embeddings=self.tie_word_embeddings, norm_affine=self.layer_norm_elementwise_affine,
            positions=self.max_position_embeddings + OPT_POSITION_OFFSET, body="model.decoder",
            layer_norms=("self_attn_layer_norm", "final_layer_norm"), extras=projections,
            final_norm="final_layer_norm" if final else None,
        )

    @model_validator(mode="after")
    def _check_shape(self) -> OPTConfig:
        check_divides("num_attention_heads", self.num_attention_heads, "hidden_size", self.hidden_size)
        return self

    @property
    def embed_dim(self) -> int:
        """Width of the token embedding: word_embed_proj_dim, defaulting to hidden_size."""
        return self.word_embed_proj_dim or self.hidden_size

    def architecture(self) -> Architecture:
        return layernorm_architecture(
            self,
            self.hidden_size,
            self.num_attention_heads,
            num_layers=self.num_hidden_layers,
            intermediate_size=self.ffn_dim,
            hidden_act=self.activation_function,
            learned_positions=self.max_position_embeddings + OPT_POSITION_OFFSET,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
        )


class BloomConfig(FamilyConfig):
    """BLOOM (`BloomConfig`): ALiBi, a LayerNorm after the embedding, 4x MLP, tied head."""

    ALIASES: ClassVar[dict[str, str]] = {
        "n_embed": "hidden_size",  # popped from kwargs by BloomConfig
        "num_hidden_layers": "n_layer",  # BloomConfig.attribute_map
        "num_attention_heads": "n_head",
    }

    model_type: Literal["bloom"]
    vocab_size: PositiveInt = 250880
    hidden_size: PositiveInt = 64
    n_embed: PositiveInt | None = None
    n_layer: PositiveInt = 2
    num_hidden_layers: PositiveInt | None = None
    n_head: PositiveInt = 8
    num_attention_heads: PositiveInt | None = None
    hidden_dropout: NonNegativeFloat = 0.0
    attention_dropout: NonNegativeFloat = 0.0
    tie_word_embeddings: bool = True

    @model_validator(mode="after")
    def _check_shape(self) -> BloomConfig:
        check_divides("n_head", self.resolved("n_head"), "hidden_size", self.resolved("hidden_size"))
        return self

    def decoder(self) -> Decoder:
        """BloomForCausalLM (modeling_bloom.py): a LayerNorm after the embedding, 4x MLP, biases everywhere.

        P = V d + 2 d + L (12 d^2 + 13 d) + 2 d   (+ V d if untied)
        """
        d = self.resolved("hidden_size")
        attention = mha(self.resolved("n_head"), d, prefix="self_attention", fused="query_key_value",
                         fused_width=QKV * d, qkv_bias=True, o_bias=True, names=("", "", "", "dense"))
        mlp = MLP(inner=BLOOM_MLP_RATIO * d, gated=False, bias=True, names=PLAIN)
        embed_norm = Extra(name="word_embeddings_layernorm", shapes=((d,), (d,)), kind=NORM)
        return layernorm_decoder(self.resolved("n_layer"), attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, body="transformer", stack="h",
                                  embed="word_embeddings", final_norm="ln_f", extras=(embed_norm,))

    def architecture(self) -> Architecture:
        hidden = self.resolved("hidden_size")
        return layernorm_architecture(
            self,
            hidden,
            self.resolved("n_head"),
            num_layers=self.resolved("n_layer"),
            intermediate_size=BLOOM_MLP_RATIO * hidden,
            dropout=self.hidden_dropout,
            attention_dropout=self.attention_dropout,
        )
