"""Module inventory of T5 (T5ForConditionalGeneration, transformers 5.x modeling_t5.py).

Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from zeroplan.models import families as fam
from zeroplan.models.families.t5 import T5_DECODER_NORMS_PER_LAYER
from zeroplan.models.params.modules import (
    ATTENTION_PROJECTIONS,
    EMBEDDING,
    NORMS_PER_LAYER,
    Module,
    linear,
    lm_head,
)

T5_STACKS = 2  # encoder and decoder: a final norm, an embed_tokens and a relative-position table each
T5_DECODER_ATTENTIONS = 2  # decoder T5Block: self-attention and cross-attention (EncDecAttention)
T5_FF_MATRICES = {True: 3, False: 2}  # gated: wi_0, wi_1, wo; plain: wi, wo


def t5_modules(c: fam.T5Config) -> list[Module]:
    """T5ForConditionalGeneration.

    P = V d + L_e (4 d n h_d + m d F + 2 d) + L_d (8 d n h_d + m d F + 3 d) + 2 b n + 2 d   (+ V d if untied)
    (n heads, h_d = d_kv, F = d_ff, m = 3 gated / 2 plain FF matrices, b relative-position buckets,
    one bias table in the first block of each stack)
    """
    d, inner, ff = c.d_model, c.num_heads * c.d_kv, c.d_ff
    enc, dec = c.num_layers, c.decoder_layers
    attentions = enc + T5_DECODER_ATTENTIONS * dec
    relative_bias = c.relative_attention_num_buckets * c.num_heads
    ff_matrices = T5_FF_MATRICES[c.is_gated]
    return [
        Module("shared", c.vocab_size * d, role=EMBEDDING),
        Module("{encoder,decoder}.embed_tokens", c.vocab_size * d, T5_STACKS, role=EMBEDDING, tied=True),
        Module("block.*.<attention>.{q,k,v,o}", linear(d, inner, bias=False), ATTENTION_PROJECTIONS * attentions),
        Module("block.0.layer.0.SelfAttention.relative_attention_bias", relative_bias, T5_STACKS),
        Module("block.*.layer.*.DenseReluDense.{wi*,wo}", linear(d, ff, bias=False), ff_matrices * (enc + dec)),
        Module("block.*.layer.*.layer_norm", d, NORMS_PER_LAYER * enc + T5_DECODER_NORMS_PER_LAYER * dec),
        Module("{encoder,decoder}.final_layer_norm", d, T5_STACKS),
        lm_head(c.vocab_size, d, c.tie_word_embeddings),
    ]
