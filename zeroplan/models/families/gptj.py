"""GPT-J (`GPTJConfig`, modeling_gptj.py). Keys and defaults are those of transformers 5.x's configuration_gptj.py.

Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import NonNegativeFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLP, Decoder
from zeroplan.models.families.base import FamilyConfig, check_divides, decoder_architecture
from zeroplan.models.families.layernorm import GPT2_MLP_RATIO, layernorm_decoder, mha


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
        attention = mha(self.n_head, d, prefix="attn", names=("q_proj", "k_proj", "v_proj", "out_proj"))
        mlp = MLP(inner=self.inner_size, gated=False, bias=True, names=("", "fc_in", "fc_out"))
        return layernorm_decoder(self.n_layer, attention, mlp, hidden=d, vocab=self.vocab_size,
                                  tie_word_embeddings=self.tie_word_embeddings, parallel=True, lm_head_bias=True,
                                  body="transformer", stack="h", embed="wte", layer_norms=("ln_1",),
                                  final_norm="ln_f")

    def architecture(self) -> Architecture:
        return decoder_architecture(self.model_type, self.decoder(), hidden_act=self.activation_function,
                                    dropout=self.resid_pdrop, attention_dropout=self.attn_pdrop)
