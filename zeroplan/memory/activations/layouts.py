"""The fine-tune rules of the families outside Llama's module layout: phi, phi3, gpt_neox and falcon.

Pure: no I/O. Symbols as in memory.activations.flow. The same rules as flow.py's (memory.activations.site per op: a
linear keeps its input for its weight, a LayerNorm keeps everything for either gradient, the core is kept whole
when any of q, k, v needs a gradient, an activation keeps its input for its input's gradient), on these layers
(transformers==5.25.0):
  - phi (models/phi/modeling_phi.py PhiDecoderLayer): one LayerNorm, input_layernorm, whose output q_proj, k_proj,
    v_proj and mlp.fc1 all read (one tensor, kept once for all four weights); dense; fc1 -> act -> fc2; resid_dropout
    on both branches;
  - phi3 (models/phi3/modeling_phi3.py): Llama's sequence with a fused qkv_proj, o_proj, a fused mlp.gate_up_proj
    (gate and up are halves of one output: both need a gradient or neither) and down_proj;
  - gpt_neox (models/gpt_neox/modeling_gpt_neox.py GPTNeoXLayer): fused attention.query_key_value, attention.dense,
    mlp.dense_h_to_4h -> act -> dense_4h_to_h; use_parallel_residual: input_layernorm and post_attention_layernorm
    both normalise the layer input (the one tensor both LayerNorms keep), else Llama's sequence;
  - falcon (models/falcon/modeling_falcon.py FalconDecoderLayer): fused self_attention.query_key_value,
    self_attention.dense, the same plain MLP; parallel_attn with one input_layernorm that both read (phi's case),
    new_decoder_architecture's ln_attn and ln_mlp on the layer input (gpt_neox's parallel case), or the sequence.
A residual-branch dropout keeps its mask for its input's gradient: while that branch's output needs one.
"""
from __future__ import annotations

from dataclasses import dataclass

from zeroplan.memory.activations.attention import QKV
from zeroplan.memory.activations.site import Site, norm_change, readers
from zeroplan.memory.activations.traits import activation_saves, traits_of

# Where a family's layers, embeddings and final norm live (the model's own module names).
LAYER_PREFIX = {"gpt_neox": "gpt_neox.layers.", "falcon": "transformer.h."}  # the others: model.layers.
EMBEDDINGS = {"gpt_neox": "gpt_neox.embed_in.", "falcon": "transformer.word_embeddings."}  # others: model.embed_tokens.
FINAL_NORM = {"phi": ("model.", "final_layernorm"), "gpt_neox": ("gpt_neox.", "final_layer_norm"),
              "falcon": ("transformer.", "ln_f")}  # others: model.norm


@dataclass(frozen=True)
class Layout:
    """One family's layer in its local module names."""

    qkv: tuple[str, ...]  # the linears that read the attention's normed input (q, k, v or one fused)
    o: str
    up: str  # the MLP's first linear (phi3: the fused gate_up_proj)
    down: str


LAYOUTS = {
    "phi": Layout(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "self_attn.dense", "mlp.fc1",
                  "mlp.fc2"),
    "phi3": Layout(("self_attn.qkv_proj",), "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"),
    "gpt_neox": Layout(("attention.query_key_value",), "attention.dense", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"),
    "falcon": Layout(("self_attention.query_key_value",), "self_attention.dense", "mlp.dense_h_to_4h",
                     "mlp.dense_4h_to_h"),
}
# The attention terms (memory.activations.attention) that are not its core's.
NOT_CORE = ("attention norm", "q/k/v projection input", "attention output dropout mask")
QKV_TERMS = ("q, k, v (a heads)", "softmax output", "probabilities cast to e")  # eager's (eager_core_terms)


def layer_prefix(family: str, i: int) -> str:
    return f"{LAYER_PREFIX.get(family, 'model.layers.')}{i}."


def embeddings_prefix(family: str) -> str:
    return EMBEDDINGS.get(family, "model.embed_tokens.")


def final_norm(family: str) -> tuple[str, str]:
    """(the root prefix, the final norm's local name)."""
    return FINAL_NORM.get(family, ("model.", "norm"))


def norm_names(kind) -> tuple[str, str]:
    """(the attention's norm, the MLP's); the same name twice where one norm serves both (phi, falcon-7b)."""
    if kind.parallel_attn and kind.norms_per_layer == 1:
        return "input_layernorm", "input_layernorm"
    if kind.family == "falcon" and kind.parallel_attn:  # new_decoder_architecture, num_ln_in_parallel_attn 2
        return "ln_attn", "ln_mlp"
    return "input_layernorm", "post_attention_layernorm"


def layout_change(site: Site, kind, attn: dict[str, int], mlp: dict[str, int], style: str,
                  grad_in: bool) -> tuple[int, bool, bool]:
    """One layer of a LAYOUTS family (`attn`, `mlp`: full training's terms of each half): (the fine-tune's delta,
    output needs a gradient, the core saved anything)."""
    lay = LAYOUTS[kind.family]
    t, h, e = site.t, kind.hidden_size, site.e
    n_attn, n_mlp = norm_names(kind)
    shared = n_attn == n_mlp  # one normed tensor read by the attention and the MLP
    two_on_input = kind.parallel_attn and not shared  # two LayerNorms keep the same layer input
    delta = norm_change(site, n_attn, style, attn["attention norm"], t, h, grad_in)
    g1 = grad_in or site.train(n_attn)
    if two_on_input:
        delta += _second_norm(site, n_mlp, mlp["MLP norm"], e * t * h, grad_in, g1)
    outs = _qkv_outs(lay, kind) | ({lay.up: _up_width(kind)} if shared else {})
    delta += readers(site, outs, h, attn["q/k/v projection input"], g1)
    grads = [g1 or site.changes(n) for n in lay.qkv]
    core_grad = any(grads)
    if not core_grad:
        delta -= sum(v for n, v in attn.items() if n not in NOT_CORE and "output projection input" not in n)
    elif len(lay.qkv) == QKV:  # separate q, k, v: eager attention keeps what each one's gradient needs
        delta -= _eager_unneeded(attn, site.e * t * kind.num_attention_heads * kind.head_dim, *grads)
    o_input = sum(v for n, v in attn.items() if "output projection input" in n)  # a copy only the o linear keeps
    delta += readers(site, {lay.o: h}, kind.num_attention_heads * kind.head_dim, o_input, core_grad)
    ga = core_grad or site.changes(lay.o)
    if not ga:
        delta -= attn.get("attention output dropout mask", 0)
    if shared:
        g_mlp_in = g1
    elif two_on_input:
        g_mlp_in = grad_in or site.train(n_mlp)
    else:  # the sequence: the MLP's norm reads the residual sum after the attention
        g2 = grad_in or ga
        delta += norm_change(site, n_mlp, style, mlp["MLP norm"], t, h, g2)
        g_mlp_in = g2 or site.train(n_mlp)
    d_mlp, g_mlp = _mlp_change(site, kind, lay, mlp, g_mlp_in, None if shared else mlp["MLP input"])
    return delta + d_mlp, grad_in or ga or g_mlp, core_grad


def _eager_unneeded(attn: dict[str, int], one: int, gq: bool, gk: bool, gv: bool) -> int:
    """What eager attention (eager_attention_forward: q k^T, softmax, p v) does not save when only some of q, k, v
    need a gradient: q k^T keeps q for k's gradient and k for q's; the softmax its output for the scores'
    (q's or k's); p v keeps p for v's gradient (the probabilities cast to e, or the fp32 softmax output itself)
    and v for p's. Read where the saved q, k, v are three a-head tensors (separate projections: phi)."""
    if attn.get(QKV_TERMS[0]) != QKV * one or not attn.get(QKV_TERMS[1]):
        return 0  # SDPA / FlashAttention: the kernel keeps q, k, v, output and log-sum-exp for any of them
    scores = gq or gk
    dropped = (0 if gk else one) + (0 if gq else one) + (0 if scores else one)
    cast = attn.get(QKV_TERMS[2], 0)
    if not scores:
        dropped += attn[QKV_TERMS[1]] if cast or not gv else 0
    if cast and not gv:
        dropped += cast
    return dropped


def _second_norm(site: Site, local: str, stats: int, x_bytes: int, grad_in: bool, first_kept: bool) -> int:
    """The MLP's LayerNorm on the layer input beside the attention's (their `MLP norm` term is its mean and rstd;
    the input is counted with the attention's norm): kept for either gradient, the input brought back when only
    this norm keeps it."""
    if grad_in or site.train(local):
        return 0 if first_kept else x_bytes
    return -stats


def _qkv_outs(lay: Layout, kind) -> dict[str, int]:
    a, g, d = kind.num_attention_heads, kind.num_key_value_heads, kind.head_dim
    if len(lay.qkv) == 1:
        return {lay.qkv[0]: (a + 2 * g) * d}
    return dict(zip(lay.qkv, (a * d, g * d, g * d)))


def _up_width(kind) -> int:
    return kind.intermediate_size * (2 if kind.gated_mlp else 1)


def _mlp_change(site: Site, kind, lay: Layout, mlp: dict[str, int], grad: bool,
                input_bytes: int | None) -> tuple[int, bool]:
    """up (or phi3's gate_up) -> act (x up) -> down; input_bytes None: the input is read with the attention's."""
    f, h = kind.intermediate_size, kind.hidden_size
    inner = site.e * site.t * f
    delta = 0 if input_bytes is None else readers(site, {lay.up: _up_width(kind)}, h, input_bytes, grad)
    g_up = grad or site.changes(lay.up)
    product = mlp.get("activation output and up projection (gate product)", 0)
    down_x = mlp["down projection input"]
    if not g_up:
        delta -= mlp.get("activation", 0) + product
        if not down_x and activation_saves(traits_of(kind)).saves_output:
            delta, down_x = delta + inner, inner  # the activation's saved output was the down input too
    delta += readers(site, {lay.down: h}, f, down_x, g_up)
    g_mlp = g_up or site.changes(lay.down)
    if not g_mlp:
        delta -= mlp.get("MLP output dropout mask", 0)
    return delta, g_mlp

