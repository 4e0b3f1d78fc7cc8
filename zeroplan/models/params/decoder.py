"""The module inventory of a `Decoder` description (zeroplan.models.block): every nn.Module transformers builds,
named as transformers names it (`*` for the layer index), with its own parameters, tensor shapes and kind.

Layers with the same modules are merged (count = how many layers hold the module), so a dense-then-MoE model
lists its dense MLP once with the dense layers' count and its experts once with the MoE layers' count.
Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from math import prod

from zeroplan.models.block import (
    MLA,
    MLP,
    Attention,
    CompressedAttention,
    Decoder,
    Extra,
    Layer,
    LinearAttention,
    MoE,
)
from zeroplan.models.params.modules import (
    BODY,
    COLUMN,
    EMBEDDING,
    EMBEDDING_KIND,
    EXPERTS,
    EXPERTS_KIND,
    GATE_UP,
    LINEAR,
    NORM,
    OTHER,
    ROW,
    Module,
    linear_shapes,
)

Shapes = tuple[tuple[int, ...], ...]


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _module(name: str, shapes: Shapes, kind: str, **fields) -> Module:
    return Module(name, sum(prod(s) for s in shapes), shapes=shapes, kind=kind, **fields)


def linear_module(name: str, n_in: int, n_out: int, bias: bool, kind: str, conv1d: bool = False) -> Module:
    """nn.Linear (or GPT-2's Conv1D): weight (out, in) [(in, out) for Conv1D], bias (out,)."""
    shapes = linear_shapes(n_in, n_out, bias, conv1d)
    return _module(name, shapes, kind, in_features=n_in, out_features=n_out)


def norm_module(name: str, width: int, dec: Decoder) -> Module | None:
    """An RMSNorm (weight) or LayerNorm (weight and bias); None when the norm has no parameters."""
    if not dec.norm_affine:
        return None
    with_bias = dec.norm == "layernorm" and dec.norm_bias
    return _module(name, ((width,), (width,)) if with_bias else ((width,),), NORM)


def _attention(a: Attention, base: str, dec: Decoder) -> list[Module | None]:
    d, p = dec.hidden, _join(base, a.prefix)
    q_width, kv_width = a.heads * a.head_dim, a.kv_heads * a.head_dim
    q_out = q_width * (2 if a.output_gate else 1)
    q, k, v, o = a.names
    if a.fused:
        width = a.fused_width or q_out + 2 * kv_width
        projections = [linear_module(_join(p, a.fused), d, width, a.qkv_bias, COLUMN, a.conv1d)]
    else:
        keys = [] if a.kv_shared else [linear_module(_join(p, k), d, kv_width, a.qkv_bias, COLUMN)]
        values = [] if a.kv_shared or a.k_eq_v else [linear_module(_join(p, v), d, kv_width, a.qkv_bias, COLUMN)]
        projections = [linear_module(_join(p, q), d, q_out, a.qkv_bias, COLUMN), *keys, *values]
    modules = [*projections, linear_module(_join(p, o), q_width, d, a.o_bias, ROW, a.conv1d)]
    if a.qk_norm != "none":
        full = a.qk_norm == "full"
        q_norm, k_norm = a.qk_norm_names
        if a.qk_norm_stacked:  # CohereLayerNorm((heads, h_d)): one weight row per head
            modules += [_module(_join(p, q_norm), ((a.heads, a.head_dim),), NORM),
                        _module(_join(p, k_norm), ((a.kv_heads, a.head_dim),), NORM)]
        else:
            modules.append(norm_module(_join(p, q_norm), q_width if full else a.head_dim, dec))
            if not a.kv_shared:  # a kv-sharing layer has no k norm (Gemma4TextAttention)
                modules.append(norm_module(_join(p, k_norm), kv_width if full else a.head_dim, dec))
    if a.sinks:
        modules.append(_module(p, ((a.heads,),), OTHER, tensors=("sinks",)))  # GptOssAttention.sinks
    return modules


def _mla(a: MLA, base: str, dec: Decoder) -> list[Module | None]:
    d, p = dec.hidden, _join(base, a.prefix)
    qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
    if a.q_lora_rank is None:
        query = [linear_module(_join(p, "q_proj"), d, a.heads * qk_head, False, COLUMN)]
    else:
        query = [
            linear_module(_join(p, "q_a_proj"), d, a.q_lora_rank, a.bias, LINEAR),
            norm_module(_join(p, "q_a_layernorm"), a.q_lora_rank, dec),
            linear_module(_join(p, "q_b_proj"), a.q_lora_rank, a.heads * qk_head, False, COLUMN),
        ]
    return [
        *query,
        *_indexer(a, p, d),
        linear_module(_join(p, "kv_a_proj_with_mqa"), d, a.kv_lora_rank + a.qk_rope_head_dim, a.bias, LINEAR),
        norm_module(_join(p, "kv_a_layernorm"), a.kv_lora_rank, dec),
        linear_module(_join(p, "kv_b_proj"), a.kv_lora_rank, a.heads * (a.qk_nope_head_dim + a.v_head_dim), False,
                      COLUMN),
        linear_module(_join(p, "o_proj"), a.heads * a.v_head_dim, d, a.bias, ROW),
    ]


def _indexer(a: MLA, p: str, d: int) -> list[Module]:
    """DeepSeek-V3.2's indexer: wq_b (from the low-rank query), wk, k_norm (nn.LayerNorm: weight and bias),
    weights_proj."""
    if a.indexer is None:
        return []
    heads, width, base = *a.indexer, _join(p, "indexer")
    return [linear_module(_join(base, "wq_b"), a.q_lora_rank or d, heads * width, False, LINEAR),
            linear_module(_join(base, "wk"), d, width, False, LINEAR),
            _module(_join(base, "k_norm"), ((width,), (width,)), NORM),
            linear_module(_join(base, "weights_proj"), d, heads, False, LINEAR)]


def _linear_attention(a: LinearAttention, base: str, dec: Decoder) -> list[Module | None]:
    d, p = dec.hidden, _join(base, a.prefix)
    keys, values = a.key_heads * a.key_head_dim, a.value_heads * a.value_head_dim
    if a.split:  # Qwen3_5GatedDeltaNet: the four input projections apart
        inputs = [linear_module(_join(p, "in_proj_qkv"), d, 2 * keys + values, False, COLUMN),
                  linear_module(_join(p, "in_proj_z"), d, values, False, COLUMN),
                  linear_module(_join(p, "in_proj_b"), d, a.value_heads, False, COLUMN),
                  linear_module(_join(p, "in_proj_a"), d, a.value_heads, False, COLUMN)]
    else:
        inputs = [linear_module(_join(p, "in_proj_qkvz"), d, 2 * keys + 2 * values, False, COLUMN),
                  linear_module(_join(p, "in_proj_ba"), d, 2 * a.value_heads, False, COLUMN)]
    return [
        _module(p, ((a.value_heads,), (a.value_heads,)), OTHER, tensors=("dt_bias", "A_log")),
        _module(_join(p, "conv1d"), ((2 * keys + values, 1, a.conv_kernel),), OTHER),
        *inputs,
        norm_module(_join(p, "norm"), a.value_head_dim, dec),
        linear_module(_join(p, "out_proj"), values, d, False, ROW),
    ]


def _mlp(m: MLP, base: str, dec: Decoder) -> list[Module]:
    d, p = dec.hidden, _join(base, m.prefix)
    gate, up, down = m.names
    if m.fused:
        inputs = [linear_module(_join(p, m.fused), d, GATE_UP * m.inner, m.bias, COLUMN, m.conv1d)]
    elif m.gated:
        inputs = [linear_module(_join(p, gate), d, m.inner, m.bias, COLUMN, m.conv1d),
                  linear_module(_join(p, up), d, m.inner, m.bias, COLUMN, m.conv1d)]
    else:
        inputs = [linear_module(_join(p, up), d, m.inner, m.bias, COLUMN, m.conv1d)]
    return [*inputs, linear_module(_join(p, down), m.inner, d, m.bias, ROW, m.conv1d)]


def _moe(m: MoE, base: str, dec: Decoder) -> list[Module]:
    d, p, e, i = dec.hidden, _join(base, m.prefix), m.experts, m.inner
    if m.layout == "out_in":
        shapes: Shapes = ((e, GATE_UP * i, d), (e, d, i))
    else:
        shapes = ((e, d, GATE_UP * i), (e, i, d))
    if m.expert_bias:
        shapes = (shapes[0], (e, GATE_UP * i), shapes[1], (e, d))
    experts = _module(_join(p, "experts"), shapes, EXPERTS_KIND, role=EXPERTS, in_features=d, out_features=i)
    modules = [
        linear_module(_join(p, m.router), d, e, m.router_bias, m.router_kind),
        experts._replace(active=experts.params // e * m.top_k),
    ]
    if m.router_statics:  # Ernie4_5_MoeStatics: a (1, E) parameter the router adds to its scores
        modules.append(_module(_join(p, m.router, "moe_statics"), ((1, e),), OTHER,
                               tensors=("e_score_correction_bias",)))
    if m.shared is not None:
        modules += _mlp(m.shared, p, dec)
    if m.shared_gate:
        modules.append(linear_module(_join(p, m.shared_gate_name), d, 1, False, LINEAR))
    return modules


def _compressed_attention(a: CompressedAttention, base: str, dec: Decoder) -> list[Module | None]:
    d, p, hd = dec.hidden, _join(base, a.prefix), a.head_dim
    grouped = a.o_groups * a.o_lora_rank
    modules = [
        _module(p, ((a.heads,),), OTHER, tensors=("sinks",)),  # DeepseekV4Attention.sinks
        linear_module(_join(p, "q_a_proj"), d, a.q_lora_rank, False, LINEAR),
        norm_module(_join(p, "q_a_norm"), a.q_lora_rank, dec),
        linear_module(_join(p, "q_b_proj"), a.q_lora_rank, a.heads * hd, False, COLUMN),
        linear_module(_join(p, "kv_proj"), d, hd, False, LINEAR),
        norm_module(_join(p, "kv_norm"), hd, dec),
        linear_module(_join(p, "o_a_proj"), a.heads * hd // a.o_groups, grouped, False, LINEAR),
        linear_module(_join(p, "o_b_proj"), grouped, d, False, ROW),
    ]
    if a.compress_rate:
        modules += _compressor(_join(p, "compressor"), d, hd, a.compress_rate, 2 if a.overlap else 1, dec)
    if a.overlap:
        heads, width = a.indexer
        base_i = _join(p, "compressor", "indexer")
        modules += [*_compressor(base_i, d, width, a.compress_rate, 2, dec),
                    linear_module(_join(base_i, "q_b_proj"), a.q_lora_rank, heads * width, False, LINEAR),
                    linear_module(_join(base_i, "scorer", "weights_proj"), d, heads, False, LINEAR)]
    return modules


def _compressor(p: str, d: int, width: int, rate: int, series: int, dec: Decoder) -> list[Module | None]:
    """DeepseekV4HCACompressor / CSACompressor / Indexer's own: position_bias, kv_proj, gate_proj, kv_norm."""
    return [_module(p, ((rate, series * width),), OTHER, tensors=("position_bias",)),
            linear_module(_join(p, "kv_proj"), d, series * width, False, LINEAR),
            linear_module(_join(p, "gate_proj"), d, series * width, False, LINEAR),
            norm_module(_join(p, "kv_norm"), width, dec)]


_MIXERS = {Attention: _attention, MLA: _mla, LinearAttention: _linear_attention,
           CompressedAttention: _compressed_attention}
_FEED_FORWARDS = {MLP: _mlp, MoE: _moe}


def layer_modules(layer: Layer, dec: Decoder) -> list[Module]:
    """The modules of one decoder layer, names with `*` for its index."""
    base = _join(dec.body, dec.stack, "*")
    modules = [
        *_MIXERS[type(layer.mixer)](layer.mixer, base, dec),
        *_FEED_FORWARDS[type(layer.mlp)](layer.mlp, base, dec),
        *(_moe(layer.beside, base, dec) if layer.beside is not None else ()),
        *(norm_module(_join(base, name), dec.hidden, dec) for name in dec.layer_norms),
        *(extra_module(extra, base) for extra in layer.extras),
    ]
    return [m for m in modules if m is not None]


def extra_module(extra: Extra, base: str) -> Module:
    """A module a block description lists by hand (Extra), under `base` (the body, or a layer)."""
    role = EMBEDDING if extra.embedding else BODY
    return _module(_join(base, extra.name), extra.shapes, extra.kind, role=role, in_features=extra.in_features,
                   out_features=extra.out_features, tensors=extra.tensors)


def decoder_modules(dec: Decoder) -> list[Module]:
    """Every module of the model: embeddings, the layers (merged by kind), extras, the final norm and the head."""
    width = dec.embed_width or dec.hidden
    embed = _join(dec.body, dec.embed)
    modules = [_module(embed, ((dec.vocab, width),), EMBEDDING_KIND, role=EMBEDDING)]
    if dec.positions:
        name = _join(dec.body, dec.position_name)
        modules.append(_module(name, ((dec.positions, dec.hidden),), EMBEDDING_KIND, role=EMBEDDING))
    merged: dict[tuple[str, Shapes], Module] = {}
    for layer, count in dec.layers:
        for m in layer_modules(layer, dec):
            key = (m.name, m.shapes)
            before = merged[key].count if key in merged else 0
            merged[key] = m._replace(count=before + count)
    modules += merged.values()
    modules += [extra_module(extra, dec.body) for extra in dec.extras]
    if dec.final_norm is not None:
        modules.append(norm_module(_join(dec.body, dec.final_norm), dec.hidden, dec))
    head = linear_module(dec.head, width, dec.vocab, dec.lm_head_bias, EMBEDDING_KIND)
    modules.append(head._replace(role=EMBEDDING, tied=dec.tie_word_embeddings))
    if dec.lm_head_bias and dec.tie_word_embeddings:
        # A tied head (GPT-J) shares its weight only: the module still holds weight + bias (its own parameters,
        # DeepSpeed's largest-layer unit), and the bias is counted here, once.
        modules.append(_module(dec.head, ((dec.vocab,),), OTHER, tensors=("bias",)))
    return [m for m in modules if m is not None]


def layer_sequence(dec: Decoder) -> list[Layer]:
    """Every decoder layer in order, one entry per layer (dec.layers holds each kind with its count)."""
    return [layer for layer, n in dec.layers for _ in range(n)]


def outer_modules(dec: Decoder) -> list[Module]:
    """decoder_modules outside the layers (embeddings, extras, the final norm, the head): every name without a layer
    index wildcard."""
    return [m for m in decoder_modules(dec) if ".*." not in m.name and not m.name.endswith(".*")]


def final_norm_name(dec: Decoder) -> str | None:
    """The final norm's parameter-module name as decoder_modules writes it (None: the model has none)."""
    return _join(dec.body, dec.final_norm) if dec.final_norm else None


def persistent_buffer_numel(dec: Decoder) -> int:
    """Elements of persistent buffers that are not parameters: in the state dict and the checkpoint, not in the
    count (DeepSeek-V3's router `e_score_correction_bias`, E per MoE layer)."""
    return sum(layer.mlp.experts * count for layer, count in dec.layers
               if isinstance(layer.mlp, MoE) and layer.mlp.correction_bias)


def layer_kinds(dec: Decoder) -> list[tuple[list[Module], int]]:
    """Each distinct layer structure (its modules, one layer's worth) and how many layers have it, in order of
    first appearance: what a per-block layout of a dense-then-MoE or hybrid model needs (the merged inventory
    only says how many layers hold each module)."""
    kinds: dict[tuple, tuple[list[Module], int]] = {}
    for layer, count in dec.layers:
        modules = layer_modules(layer, dec)
        key = tuple((m.name, m.shapes) for m in modules)
        kinds[key] = (modules, kinds[key][1] + count) if key in kinds else (modules, count)
    return list(kinds.values())
