"""Which saved tensors a fine-tune still needs, layer by layer: what autograd records when parts are frozen.

Pure: no I/O. Symbols as in zeroplan.memory.activations (T = b s tokens, e compute bytes, h hidden, f MLP width,
S = T k routed pairs), a = adapter element bytes, r the rank, p the dropout. Checked against peft 0.21.2 by
validation/measure_finetune_activations.py (docs/finetune.md, "Activations").

An op saves a tensor for the gradient of some input: it saves nothing for a gradient nobody needs. So each of
full training's saved tensors (memory.activations.terms) is kept when the gradient it serves is needed. What one
norm or one set of linears (and their LoRA / DoRA adapters) keeps is memory.activations.site's; this module
walks a layer's attention and MLP with it:
  - a tensor needs a gradient when anything before it trains: g_out = g_in or (the op's parameters train);
    the attention core (SDPA) saves q, k, v, its output and log-sum-exp when any of q, k, v needs one;
  - the gate product act(g) x u saves u for act(g)'s gradient and act(g) for u's; an activation saves its input;
  - routed experts (grouped_mm) save the gathered tokens for gate_up_proj's gradient and the down input for
    down_proj's; the router's scores and top-k serve the routing weights' gradient.
A layer whose input needs no gradient and whose parameters all stay frozen records nothing (autograd builds no
graph there): a frozen prefix saves nothing.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from zeroplan.memory.activations.attention import attention_terms
from zeroplan.memory.activations.layouts import LAYOUTS, layout_change
from zeroplan.memory.activations.moe import (
    CLAMPED_SWIGLU_FAMILIES,
    CLAMPED_SWIGLU_SAVED,
)
from zeroplan.memory.activations.ops import (
    FP32_BYTES,
    INDEX_BYTES,
    PRE_AND_POST_NORMS,
    dropout_mask_bytes,
    norm_bytes,
)
from zeroplan.memory.activations.site import Site, norm_change, readers
from zeroplan.memory.activations.terms import (
    dense_mlp_terms,
    mlp_norm_terms,
    moe_mlp_terms,
)
from zeroplan.memory.activations.traits import traits_of

# The attention terms that are not the core's own (memory.activations.attention names them).
NOT_CORE = ("attention norm", "q/k/v projection input", "q norm", "k norm", "q latent norm", "q up-projection input",
            "kv latent norm", "kv up-projection input", "attention output dropout mask", "post-attention norm")
ROUTER_MODULE = {"gpt_oss": "mlp.router"}  # GptOssMLP.router; the others' TopKRouter is mlp.gate
ROUTER_TERMS = ("router sigmoid scores", "group top-k indices", "group mask", "top-k indices", "top-k renormalisation",
                "router softmax", "softmax over the top-k logits")


def _is_core(name: str) -> bool:
    return name not in NOT_CORE and "output projection input" not in name


def attention_change(site: Site, kind, by: dict[str, int], style: str, grad_in: bool) -> tuple[int, bool, bool]:
    """(delta, whether the attention's output needs a gradient, whether its core saved anything)."""
    t, h = site.t, kind.hidden_size
    delta = norm_change(site, "input_layernorm", style, by["attention norm"], t, h, grad_in)
    g1 = grad_in or site.train("input_layernorm")
    a, g, d = kind.num_attention_heads, kind.num_key_value_heads, kind.head_dim
    if kind.is_mla:
        delta_mla, core_grad = _mla_change(site, kind, by, style, g1)
        delta += delta_mla
        q_width = a * kind.v_head_dim
    else:
        delta += readers(site, {"self_attn.q_proj": a * d, "self_attn.k_proj": g * d, "self_attn.v_proj": g * d}, h,
                         by["q/k/v projection input"], g1)
        gq, gk, gv = (g1 or site.changes(f"self_attn.{n}_proj") for n in "qkv")
        for name, rows, grad in (("q", t * a, gq), ("k", t * g, gk)):
            if f"{name} norm" in by:
                per_head = kind.qk_norm == "head"
                delta += norm_change(site, f"self_attn.{name}_norm", style, by[f"{name} norm"],
                                     rows if per_head else t, d if per_head else rows // t * d, grad)
        core_grad = gq or gk or gv  # a norm after a projection that needs no gradient has none to give
        q_width = a * d
    core = sum(v for n, v in by.items() if _is_core(n))
    if not core_grad:
        delta -= core
    o_input = sum(v for n, v in by.items() if "output projection input" in n)  # a copy only o_proj keeps
    delta += readers(site, {"self_attn.o_proj": h}, q_width, o_input, core_grad)
    ga = core_grad or site.changes("self_attn.o_proj")
    if kind.norms_per_layer == PRE_AND_POST_NORMS:
        delta += norm_change(site, "post_attention_layernorm", style, by["post-attention norm"], t, h, ga)
        ga = ga or site.train("post_attention_layernorm")
    return delta, ga, core_grad


def _mla_change(site: Site, kind, by: dict[str, int], style: str, g1: bool) -> tuple[int, bool]:
    """DeepseekV3Attention: q_a_proj -> q_a_layernorm -> q_b_proj; kv_a_proj_with_mqa -> kv_a_layernorm (the latent)
    -> kv_b_proj, its rotary part straight to k."""
    t, h, a = site.t, kind.hidden_size, kind.num_attention_heads
    d_qk = kind.qk_nope_head_dim + kind.qk_rope_head_dim
    r_q, r_kv = kind.q_lora_rank, kind.kv_lora_rank
    kv_a = {"self_attn.kv_a_proj_with_mqa": r_kv + kind.qk_rope_head_dim}
    q_first = {"self_attn.q_a_proj": r_q} if r_q else {"self_attn.q_proj": a * d_qk}
    delta = readers(site, q_first | kv_a, h, by["q/k/v projection input"], g1)
    gq = g1 or site.changes(next(iter(q_first)))
    if r_q:
        delta += norm_change(site, "self_attn.q_a_layernorm", style, by["q latent norm"], t, r_q, gq)
        gq = gq or site.train("self_attn.q_a_layernorm")
        delta += readers(site, {"self_attn.q_b_proj": a * d_qk}, r_q, by["q up-projection input"], gq)
        gq = gq or site.changes("self_attn.q_b_proj")
    g_rope = g1 or site.changes("self_attn.kv_a_proj_with_mqa")
    delta += norm_change(site, "self_attn.kv_a_layernorm", style, by["kv latent norm"], t, r_kv, g_rope)
    g_kv = g_rope or site.train("self_attn.kv_a_layernorm")
    kv_b = {"self_attn.kv_b_proj": a * (kind.qk_nope_head_dim + kind.v_head_dim)}
    delta += readers(site, kv_b, r_kv, by["kv up-projection input"], g_kv)
    return delta, gq or g_rope or g_kv or site.changes("self_attn.kv_b_proj")


def dense_change(site: Site, by: dict[str, int], prefix: str, f: int, h: int, grad: bool,
                 input_bytes: int | None) -> tuple[int, bool]:
    """A gated MLP (gate, up, act x up, down) under `prefix`; input_bytes None: its input is counted elsewhere."""
    delta = 0
    if input_bytes is not None:
        delta += readers(site, {prefix + "gate_proj": f, prefix + "up_proj": f}, h, input_bytes, grad)
    gg, gu = grad or site.changes(prefix + "gate_proj"), grad or site.changes(prefix + "up_proj")
    name = "shared expert " if "shared" in prefix else ""
    if not gg:
        delta -= by.get(name + "activation", 0)
    inner = site.e * site.t * f
    if name + "activation output and up projection (gate product)" in by:
        delta -= inner * ((not gu) + (not gg))
    delta += readers(site, {prefix + "down_proj": h}, f, by[name + "down projection input"], gg or gu)
    return delta, gg or gu or site.changes(prefix + "down_proj")


def mlp_change(site: Site, kind, by: dict[str, int], style: str, grad_in: bool) -> tuple[int, bool]:
    """The MLP half of a layer (norm, dense or routed MLP, Gemma's post-norm): (delta, output needs a gradient)."""
    t, h = site.t, kind.hidden_size
    post = kind.norms_per_layer == PRE_AND_POST_NORMS
    norm = "pre_feedforward_layernorm" if post else "post_attention_layernorm"
    delta = norm_change(site, norm, style, by["MLP norm"], t, h, grad_in)
    g3 = grad_in or site.train(norm)
    if kind.is_moe:
        d_moe, g_mlp = _moe_change(site, kind, by, g3)
    else:
        d_moe, g_mlp = dense_change(site, by, "mlp.", kind.intermediate_size, h, g3, by["MLP input"])
    delta += d_moe
    if post:
        delta += norm_change(site, "post_feedforward_layernorm", style, by["post-MLP norm"], t, h, g_mlp)
        g_mlp = g_mlp or site.train("post_feedforward_layernorm")
    return delta, g_mlp


def _moe_change(site: Site, kind, by: dict[str, int], g3: bool) -> tuple[int, bool]:
    """Router, grouped_mm experts and shared experts (memory.activations.terms.moe_mlp_terms)."""
    t, e, h, f = site.t, site.e, kind.hidden_size, kind.intermediate_size
    routed = t * kind.num_experts_per_tok
    name = ROUTER_MODULE.get(kind.family, "mlp.gate")
    router, router_weight = site.train(name), site.train(name + ".weight")
    gate_up, down = site.train("mlp.experts.gate_up_proj"), site.train("mlp.experts.down_proj")
    ge, gr = g3 or gate_up, g3 or router
    clamped = kind.family in CLAMPED_SWIGLU_FAMILIES
    if clamped and not (site.train("mlp.experts.gate_up_proj_bias") or site.train("mlp.experts.down_proj_bias")):
        delta = -INDEX_BYTES * routed  # bias[expert_ids] keeps its index for the biases' gradient only
    else:
        delta = 0
    copies = by.get("router fp32 input and weight copies", 0)  # F.linear on fp32 copies (16-bit only)
    if copies:
        n_h = FP32_BYTES * kind.num_experts * h
        delta -= (copies - n_h if not router_weight else 0) + (n_h if not g3 else 0)
    reads_input = router_weight and not copies  # F.linear(x, W) keeps x for W's gradient
    shared = {"mlp.shared_experts.gate_proj": kind.shared_expert_intermediate_size,
              "mlp.shared_experts.up_proj": kind.shared_expert_intermediate_size}
    if kind.shared_expert_intermediate_size:
        delta += readers(site, shared, h, 0 if reads_input else by["MLP input"], g3)  # they read the MoE input
    elif not reads_input:
        delta -= by["MLP input"]
    if not gr:
        delta -= sum(by.get(n, 0) for n in ROUTER_TERMS)
    if not (ge or gr):
        delta -= by["expert routing indices and offsets"]
    if not gate_up:
        delta -= by["tokens gathered per expert"]
    if not ge:  # the activation's tensors (GptOssExperts' clamped SwiGLU: four of them) go with the gate/up output
        delta -= by["expert gate/up outputs"] + e * routed * f * (CLAMPED_SWIGLU_SAVED - 1 if clamped else 1)
    if not down:
        delta -= e * routed * f  # the down input
    weights = by["expert outputs and routing weights"] - e * routed * h
    delta -= (e * routed * h if not gr else 0) + (weights if not (ge or down) else 0)
    delta += wrapped_bytes(site, copies > 0, g3)
    g_mlp = ge or gr or down
    if kind.shared_expert_intermediate_size:
        d_shared, g_shared = dense_change(site, by, "mlp.shared_experts.", kind.shared_expert_intermediate_size, h,
                                          g3, None)
        delta, g_mlp = delta + d_shared, g_mlp or g_shared
    return delta, g_mlp


def wrapped_bytes(site: Site, router_copies: bool, grad_in: bool) -> int:
    """What peft's ParamWrapper (tuners/lora/layer.py) adds on a layer's experts and router.

    The effective weight W + delta is a tensor, no longer a parameter: the grouped_mm (experts) or F.linear
    (router) keeps it for its input's gradient, e x its elements (a router on fp32 copies keeps the copy, counted
    already). A 3-D expert tensor folds its factors with torch.baddbmm(W, lhs, rhs) (_LoraFactorsProxy), which
    keeps lhs and rhs: views of the adapter weights when a = e, copies cast to e otherwise, e r E (in + out).
    A router weight (2-D) gets W + (B A) s (_LoraParameterProxy): the matmul keeps the adapter weights only.
    """
    e, total = site.e, 0
    for w in site.wrapped:
        router = len(w.shape) == 2
        if grad_in and not (router and router_copies):
            total += e * w.param_numel
        if not router and site.a != e:
            total += e * w.adapter_numel  # lhs (E, in, r) and rhs (E, r, out), cast to the parameter's dtype
    return total


@lru_cache(maxsize=1024)  # a LoRA's layers are alike: one computation per layer kind
def layer_change(site: Site, kind, b: int, s: int, flash: bool, grad_in: bool) -> tuple[int, int, bool, bool, int]:
    """One layer: (its full-training bytes, the fine-tune's delta, output needs a gradient, core saved anything, the
    bytes of the inputs an old bitsandbytes MatMul4Bit keeps on its ctx: Site.held)."""
    traits = traits_of(kind)
    held: list[int] = []
    site = replace(site, held=held)
    attn = attention_terms(kind, traits, b, s, site.e, flash=flash, selective=False)
    full_attn, cast = attn, 0
    if site.autocast:  # the core (SDPA or the eager matmuls) runs in the autocast dtype on casts of q, k, v
        core16 = attention_terms(kind, traits, b, s, site.autocast, flash=flash, selective=False)
        attn = [(n, v) for n, v in attn if not _is_core(n)] + [(n, v) for n, v in core16 if _is_core(n)]
        cast = sum(v for _, v in attn) - sum(v for _, v in full_attn)
    mlp = mlp_norm_terms(kind, traits, site.t, site.e)
    mlp += moe_mlp_terms(kind, site.t, site.e, traits) if kind.is_moe else dense_mlp_terms(kind, traits, site.t, site.e)
    if kind.norms_per_layer == PRE_AND_POST_NORMS:
        mlp.append(("post-MLP norm", norm_bytes(traits.norm, site.t, kind.hidden_size, site.e)))
    if kind.family in LAYOUTS:  # memory.activations.layouts: phi, phi3, gpt_neox, falcon
        mlp.append(("MLP output dropout mask", dropout_mask_bytes(traits, "mlp_out", site.t * kind.hidden_size)))
        delta, g_out, core = layout_change(site, kind, dict(attn), dict(mlp), traits.norm, grad_in)
    else:
        d_attn, ga, core = attention_change(site, kind, dict(attn), traits.norm, grad_in)
        d_mlp, g_mlp = mlp_change(site, kind, dict(mlp), traits.norm, grad_in or ga)
        delta, g_out = d_attn + d_mlp, grad_in or ga or g_mlp
    full = sum(v for _, v in full_attn + mlp)
    if not grad_in and not site.trained and not site.adapted:
        return full, -full, g_out, core, 0  # nothing trains and nothing flows in: autograd records nothing here
    return full, delta + cast, g_out, core, sum(held)
