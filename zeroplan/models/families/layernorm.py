"""LayerNorm decoder families: GPT-2, GPT-NeoX, OPT, BLOOM, Falcon.

Keys and defaults are those of the transformers config classes (configuration_<family>.py,
transformers 5.x); only keys that change the parameter count or the Architecture are modelled.
Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import LINEAR, MLP, NORM, Attention, Decoder, Extra, Layer, uniform
from zeroplan.models.families.base import FamilyConfig, check_divides, decoder_architecture

GPT2_MLP_RATIO = 4  # GPT2MLP inner width when n_inner is None (modeling_gpt2.py: 4 * hidden_size)
BLOOM_MLP_RATIO = 4  # BloomMLP: dense_h_to_4h is 4 * hidden_size wide, no config key
FALCON_MLP_RATIO = 4  # FalconConfig: ffn_hidden_size defaults to 4 * hidden_size
OPT_POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding keeps 2 extra rows (padding offset, fairseq legacy)
QKV = 3  # fused query, key and value projections (GPT-2 c_attn, NeoX/BLOOM query_key_value)


PLAIN = ("", "dense_h_to_4h", "dense_4h_to_h")  # an ungated MLP's (gate, up, down) names in NeoX, BLOOM, Falcon


def _mha(heads: int, hidden: int, **fields: Any) -> Attention:
    """Multi-head attention of width d: heads of d / h."""
    return Attention(heads=heads, kv_heads=fields.pop("kv_heads", heads), head_dim=hidden // heads, **fields)


def _layernorm_decoder(layers: int, attention: Attention, mlp: MLP, **fields: Any) -> Decoder:
    return Decoder(layers=uniform(Layer(mixer=attention, mlp=mlp), layers), norm="layernorm", norm_bias=True,
                   **fields)


def _architecture(config: FamilyConfig, hidden: int, heads: int, **fields: Any) -> Architecture:
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
        attention = _mha(self.n_head, d, prefix="attn", fused="c_attn", fused_width=QKV * d, qkv_bias=True,
                         o_bias=True, names=("", "", "", "c_proj"), conv1d=True)
        mlp = MLP(inner=self.inner_size, gated=False, bias=True, names=("", "c_fc", "c_proj"), conv1d=True)
        return _layernorm_decoder(self.n_layer, attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, positions=self.n_positions,
                                  body="transformer", stack="h", embed="wte", position_name="wpe",
                                  layer_norms=("ln_1", "ln_2"), final_norm="ln_f")

    def architecture(self) -> Architecture:
        return _architecture(
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
        """GPTNeoXForCausalLM (modeling_gpt_neox.py): fused query_key_value, untied embed_out.

        P = 2 V d + L (4 d^2 + 2 d I + 9 d + I) + 2 d   (attention_bias; 4 d fewer per layer without)
        """
        d, bias = self.hidden_size, self.attention_bias
        attention = _mha(self.num_attention_heads, d, prefix="attention", fused="query_key_value",
                         fused_width=QKV * d, qkv_bias=bias, o_bias=bias, names=("", "", "", "dense"))
        mlp = MLP(inner=self.intermediate_size, gated=False, bias=True, names=PLAIN)
        return _layernorm_decoder(self.num_hidden_layers, attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, parallel=self.use_parallel_residual,
                                  body="gpt_neox", embed="embed_in", final_norm="final_layer_norm", head="embed_out")

    def architecture(self) -> Architecture:
        return _architecture(
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
        attention = _mha(self.num_attention_heads, d, qkv_bias=bias, o_bias=bias,
                         names=("q_proj", "k_proj", "v_proj", "out_proj"))
        mlp = MLP(inner=self.ffn_dim, gated=False, bias=bias, prefix="", names=("", "fc1", "fc2"))
        projections = (
            Extra(name="project_out", shapes=((e, d),), kind=LINEAR, in_features=d, out_features=e),
            Extra(name="project_in", shapes=((d, e),), kind=LINEAR, in_features=e, out_features=d),
        ) if e != d else ()
        final = self.do_layer_norm_before and not self.remove_final_layer_norm
        return _layernorm_decoder(
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
        return _architecture(
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
        attention = _mha(self.resolved("n_head"), d, prefix="self_attention", fused="query_key_value",
                         fused_width=QKV * d, qkv_bias=True, o_bias=True, names=("", "", "", "dense"))
        mlp = MLP(inner=BLOOM_MLP_RATIO * d, gated=False, bias=True, names=PLAIN)
        embed_norm = Extra(name="word_embeddings_layernorm", shapes=((d,), (d,)), kind=NORM)
        return _layernorm_decoder(self.resolved("n_layer"), attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, body="transformer", stack="h",
                                  embed="word_embeddings", final_norm="ln_f", extras=(embed_norm,))

    def architecture(self) -> Architecture:
        hidden = self.resolved("hidden_size")
        return _architecture(
            self,
            hidden,
            self.resolved("n_head"),
            num_layers=self.resolved("n_layer"),
            intermediate_size=BLOOM_MLP_RATIO * hidden,
            dropout=self.hidden_dropout,
            attention_dropout=self.attention_dropout,
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
        attention = _mha(heads, d, kv_heads=self.kv_heads, prefix="self_attention", fused="query_key_value",
                         fused_width=width, qkv_bias=bias, o_bias=bias, names=("", "", "", "dense"))
        mlp = MLP(inner=self.ffn_hidden_size or FALCON_MLP_RATIO * d, gated=False, bias=bias, names=PLAIN)
        return _layernorm_decoder(self.num_hidden_layers, attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, body="transformer", stack="h",
                                  embed="word_embeddings", final_norm="ln_f", layer_norms=self.layer_norm_names,
                                  parallel=self.new_decoder_architecture or self.parallel_attn)

    def architecture(self) -> Architecture:
        hidden = self.resolved("hidden_size")
        return _architecture(
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


class GPTJConfig(FamilyConfig):
    """GPT-J (`GPTJConfig`, modeling_gptj.py, defaults = gpt-j-6b): one LayerNorm feeding attention and MLP in
    parallel, bias-free q/k/v/out projections, an MLP with biases, and an untied LM head with a bias.

    P = V d + L (4 d^2 + 2 d I + I + 3 d) + 2 d + V d + V   (I = n_inner or 4 d; tied: the V d head weight once)
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("n_embd", "n_layer", "n_head")

    model_type: Literal["gptj"]
    vocab_size: PositiveInt = 50400
    n_positions: PositiveInt = 2048
    n_embd: PositiveInt = 4096
    n_layer: PositiveInt = 28
    n_head: PositiveInt = 16
    n_inner: PositiveInt | None = None
    activation_function: str = "gelu_new"
    resid_pdrop: NonNegativeFloat = 0.0
    embd_pdrop: NonNegativeFloat = 0.0
    attn_pdrop: NonNegativeFloat = 0.0
    tie_word_embeddings: bool = False

    @model_validator(mode="after")
    def _check_shape(self) -> GPTJConfig:
        check_divides("n_head", self.n_head, "n_embd", self.n_embd)  # GPTJAttention raises otherwise
        return self

    @property
    def inner_size(self) -> int:
        return self.n_inner or GPT2_MLP_RATIO * self.n_embd  # GPTJBlock: n_inner or 4 * n_embd

    def decoder(self) -> Decoder:
        d = self.n_embd
        attention = _mha(self.n_head, d, prefix="attn", names=("q_proj", "k_proj", "v_proj", "out_proj"))
        mlp = MLP(inner=self.inner_size, gated=False, bias=True, names=("", "fc_in", "fc_out"))
        return _layernorm_decoder(self.n_layer, attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, parallel=True, lm_head_bias=True,
                                  body="transformer", stack="h", embed="wte", layer_norms=("ln_1",),
                                  final_norm="ln_f")

    def architecture(self) -> Architecture:
        return decoder_architecture(self.model_type, self.decoder(), hidden_act=self.activation_function,
                                    dropout=self.resid_pdrop, attention_dropout=self.attn_pdrop)
