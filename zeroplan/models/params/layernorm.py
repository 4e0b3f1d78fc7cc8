"""Module inventories of the LayerNorm decoders: GPT-2, GPT-NeoX, OPT, BLOOM, Falcon.

Each function lists what transformers' *ForCausalLM builds (transformers 5.x modeling_<family>.py).
Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from zeroplan.models import families as fam
from zeroplan.models.families.layernorm import BLOOM_MLP_RATIO, OPT_POSITION_OFFSET
from zeroplan.models.params.modules import (
    ATTENTION_PROJECTIONS,
    EMBEDDING,
    NORMS_PER_LAYER,
    QKV,
    Module,
    layernorm,
    linear,
    linear_shapes,
    lm_head,
)


def gpt2_modules(c: fam.GPT2Config) -> list[Module]:
    """GPT2LMHeadModel.

    P = V d + n_pos d + L (4 d^2 + 2 d I + 9 d + I) + 2 d   (I = n_inner or 4 d; + V d if untied)
    """
    d, inner, n = c.n_embd, c.inner_size, c.n_layer
    return [
        Module("wte", c.vocab_size * d, role=EMBEDDING, shapes=((c.vocab_size, d),)),
        Module("wpe", c.n_positions * d, role=EMBEDDING, shapes=((c.n_positions, d),)),
        Module("h.*.ln_1, ln_2", layernorm(d), NORMS_PER_LAYER * n, shapes=((d,), (d,))),
        Module("h.*.attn.c_attn", linear(d, QKV * d, bias=True), n, shapes=linear_shapes(d, QKV * d, True, conv1d=True)),
        Module("h.*.attn.c_proj", linear(d, d, bias=True), n, shapes=linear_shapes(d, d, True, conv1d=True)),
        Module("h.*.mlp.c_fc", linear(d, inner, bias=True), n, shapes=linear_shapes(d, inner, True, conv1d=True)),
        Module("h.*.mlp.c_proj", linear(inner, d, bias=True), n, shapes=linear_shapes(inner, d, True, conv1d=True)),
        Module("ln_f", layernorm(d), shapes=((d,), (d,))),
        lm_head(c.vocab_size, d, c.tie_word_embeddings),
    ]


def gpt_neox_modules(c: fam.GPTNeoXConfig) -> list[Module]:
    """GPTNeoXForCausalLM.

    P = 2 V d + L (4 d^2 + 2 d I + 9 d + I) + 2 d   (attention_bias; 4 d fewer per layer without)
    """
    d, inner, n, bias = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.attention_bias
    return [
        Module("embed_in", c.vocab_size * d, role=EMBEDDING),
        Module("layers.*.input_layernorm, post_attention_layernorm", layernorm(d), NORMS_PER_LAYER * n),
        Module("layers.*.attention.query_key_value", linear(d, QKV * d, bias), n),
        Module("layers.*.attention.dense", linear(d, d, bias), n),
        Module("layers.*.mlp.dense_h_to_4h", linear(d, inner, bias=True), n),
        Module("layers.*.mlp.dense_4h_to_h", linear(inner, d, bias=True), n),
        Module("final_layer_norm", layernorm(d)),
        lm_head(c.vocab_size, d, c.tie_word_embeddings),
    ]


def opt_modules(c: fam.OPTConfig) -> list[Module]:
    """OPTForCausalLM.

    P = V e + (n_pos + 2) d + [2 d e if e != d] + L (4 d^2 + 2 d F + 9 d + F) + 2 d
    (e = word_embed_proj_dim; biases with enable_bias, norm weights with layer_norm_elementwise_affine;
    the final norm only with do_layer_norm_before)
    """
    d, e, ffn, n, bias = c.hidden_size, c.embed_dim, c.ffn_dim, c.num_hidden_layers, c.enable_bias
    norm = layernorm(d, c.layer_norm_elementwise_affine)
    modules = [
        Module("embed_tokens", c.vocab_size * e, role=EMBEDDING),
        Module("embed_positions", (c.max_position_embeddings + OPT_POSITION_OFFSET) * d, role=EMBEDDING),
        Module("layers.*.self_attn.{q,k,v,out}_proj", linear(d, d, bias), ATTENTION_PROJECTIONS * n),
        Module("layers.*.self_attn_layer_norm, final_layer_norm", norm, NORMS_PER_LAYER * n),
        Module("layers.*.fc1", linear(d, ffn, bias), n),
        Module("layers.*.fc2", linear(ffn, d, bias), n),
        lm_head(c.vocab_size, e, c.tie_word_embeddings),
    ]
    if e != d:
        modules += [Module("project_in", linear(e, d, bias=False)), Module("project_out", linear(d, e, bias=False))]
    if c.do_layer_norm_before and not c.remove_final_layer_norm:
        modules.append(Module("final_layer_norm", norm))
    return modules


def bloom_modules(c: fam.BloomConfig) -> list[Module]:
    """BloomForCausalLM.

    P = V d + 2 d + L (12 d^2 + 13 d) + 2 d   (+ V d if untied)
    """
    d, n = c.resolved("hidden_size"), c.resolved("n_layer")
    inner = BLOOM_MLP_RATIO * d
    return [
        Module("word_embeddings", c.vocab_size * d, role=EMBEDDING),
        Module("word_embeddings_layernorm", layernorm(d)),
        Module("h.*.input_layernorm, post_attention_layernorm", layernorm(d), NORMS_PER_LAYER * n),
        Module("h.*.self_attention.query_key_value", linear(d, QKV * d, bias=True), n),
        Module("h.*.self_attention.dense", linear(d, d, bias=True), n),
        Module("h.*.mlp.dense_h_to_4h", linear(d, inner, bias=True), n),
        Module("h.*.mlp.dense_4h_to_h", linear(inner, d, bias=True), n),
        Module("ln_f", layernorm(d)),
        lm_head(c.vocab_size, d, c.tie_word_embeddings),
    ]


def falcon_modules(c: fam.FalconConfig) -> list[Module]:
    """FalconForCausalLM.

    P = V d + L (d (h + 2 k) h_d + d^2 + 2 d F + 2 d m) + 2 d   (+ biases with `bias`, + V d if untied)
    (h query heads, k K/V heads, h_d = d / h, F = ffn_hidden_size or 4 d, m LayerNorms per layer)
    """
    arch = c.architecture()
    d, inner, n, bias = arch.hidden_size, arch.intermediate_size, arch.num_layers, c.bias
    qkv_width = (arch.num_attention_heads + 2 * arch.num_key_value_heads) * arch.head_dim
    if not (c.new_decoder_architecture or c.multi_query):
        qkv_width = QKV * d  # FalconAttention: the classic fused projection, whatever num_kv_heads says
    return [
        Module("word_embeddings", c.vocab_size * d, role=EMBEDDING),
        Module("h.*.self_attention.query_key_value", linear(d, qkv_width, bias), n),
        Module("h.*.self_attention.dense", linear(d, d, bias), n),
        Module("h.*.mlp.dense_h_to_4h", linear(d, inner, bias), n),
        Module("h.*.mlp.dense_4h_to_h", linear(inner, d, bias), n),
        Module("h.*.<layer norms>", layernorm(d), arch.norms_per_layer * n),
        Module("ln_f", layernorm(d)),
        lm_head(c.vocab_size, d, c.tie_word_embeddings),
    ]
