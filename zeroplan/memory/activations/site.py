"""One layer's fine-tune (Site) and what a single op saves under it: a norm, the linears reading one tensor, and
their LoRA / DoRA adapters; memory.activations.flow walks a layer's attention and MLP with these.

Pure: no I/O. Symbols as in memory.activations.flow (T tokens, e compute bytes, a adapter element bytes, r the
rank, p the dropout). An op saves nothing for a gradient nobody needs:
  - a linear saves its input for its weight's gradient only (the weight itself, a parameter, is not counted);
  - a norm's `weight * x_hat` saves x_hat for the weight's gradient (e T n in LlamaRMSNorm, 4 T n in Gemma's
    fp32 (1 + w)), the rest (the fp32 input, rsqrt, Gemma's 1 + w) for its input's; native LayerNorm saves
    everything for either.
peft's lora.Linear (tuners/lora/layer.py Linear.forward): x cast to the adapter dtype, dropout (nn.Identity at
p = 0), lora_A saves its input, lora_B lora_A's output (a T r). bitsandbytes before 0.43.2: a 4-bit linear's
MatMul4Bit keeps its input too, wherever the input needs a gradient (Site.quant_input).
Under autocast on an fp32 stream (peft's prepare_model_for_kbit_training with bf16/fp16 mixed precision,
Site.autocast = c, the autocast dtype's bytes): each lora_A casts its input to c itself (autocast caches casts of
leaf parameters only), so every adapter saves its own c T in copy, lora_B a c T r input, and each linear keeps the
c-cast copy of its fp32 weight that its input's gradient needs (lora_B always: c out r; lora_A where its input
needs a gradient: c r in). Measured: validation/measure_kbit_autocast.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from zeroplan.memory.activations.ops import FP32_BYTES, MASK_BYTES


@dataclass(frozen=True)
class Site:
    """One layer's fine-tune, in its own (local) names: what trains, what carries adapters, dtype and tokens."""

    trained: frozenset[str]  # every dotted prefix of a local parameter name that trains (or that peft wraps)
    adapted: frozenset[str]  # local module names with LoRA adapters
    wrapped: tuple  # the AdaptedParams of this layer (peft ParamWrapper on experts and routers)
    t: int
    e: int
    a: int
    rank: int
    dropout: float
    dora: bool
    # bitsandbytes before 0.43.2: a 4-bit linear keeps its input wherever a gradient flows through it (memory/quant.py)
    quant_input: bool = False
    # where readers() notes the bytes of each input such a MatMul4Bit keeps on its ctx (flow.layer_change sets it:
    # a loop that holds the previous graph keeps them after the backward, memory.activations.loop); None: not noted
    held: list[int] | None = field(default=None, compare=False)
    # the autocast dtype's bytes when the stream is fp32 under autocast (prepare_model_for_kbit_training + bf16/fp16
    # mixed precision): adapters save their own cast copies, the attention core runs in it; 0 = no such autocast
    autocast: int = 0

    @classmethod
    def of(cls, prefix: str, trains, adapted, wrapped, t: int, e: int, a: int = 0, rank: int = 0,
           dropout: float = 0.0, dora: bool = False, quant_input: bool = False, autocast: int = 0) -> Site:
        """The site under `prefix` (model.layers.i.) from full names: trainable parameters, adapted modules,
        wrapped AdaptedParams."""
        wrapped = tuple(replace(w, name=w.name[len(prefix):]) for w in wrapped if w.name.startswith(prefix))
        names = [n[len(prefix):] for n in trains if n.startswith(prefix)] + [w.name for w in wrapped]
        trained = {".".join(parts[:i]) for parts in (n.split(".") for n in names) for i in range(1, len(parts) + 1)}
        local = frozenset(m[len(prefix):] for m in adapted if m.startswith(prefix))
        return cls(frozenset(trained), local, wrapped, t, e, a, rank, dropout, dora, quant_input, autocast=autocast)

    def train(self, local: str) -> bool:
        """A base parameter (or any under a module) of this layer trains."""
        return local in self.trained

    def changes(self, local: str) -> bool:
        """The module's output needs a gradient whatever its input: it trains or carries an adapter."""
        return local in self.trained or local in self.adapted


def weight_part(style: str, rows: int, width: int, e: int) -> int:
    """What a norm saves for its weight's gradient only (x_hat before the weight multiplies it)."""
    if style in ("llama", "t5"):
        return e * rows * width
    if style in ("gemma", "olmo2"):  # Gemma's normed fp32 x (1 + w); Olmo2's weight * fp32 x_hat
        return FP32_BYTES * rows * width
    return 0  # native_layer_norm keeps input, mean and rstd for either gradient


def norm_change(site: Site, local: str, style: str, full: int, rows: int, width: int, grad_in: bool) -> int:
    """Saved bytes of one norm minus full training's."""
    trains = site.train(local)
    if style == "layernorm":
        return 0 if trains or grad_in else -full
    w = weight_part(style, rows, width, site.e)
    return (w if trains else 0) + (full - w if grad_in else 0) - full


def dora_bytes(t: int, n_in: int, n_out: int, e: int, a: int, dropout: float, grad_in: bool) -> int:
    """What one DoRA linear saves beyond LoRA (peft tuners/lora/dora.py DoraLinearLayer.forward, variants.py):

        p = 0: e T out (the base output, reused) + a T out (the LoRA output) + a out (the detached weight norm)
               + a out (magnitude / norm) + a out (that minus 1, where the input needs a gradient)
        p > 0: the base output is recomputed from the dropped-out input in the adapter dtype, a T out, and
               F.linear keeps the weight cast to it, a out in, where the input needs a gradient and a != e.
    The lora_B(lora_A(I)) weight is built with a graph used only detached: freed when the forward ends.
    """
    scale = a * n_out * (3 if grad_in else 2)
    if dropout == 0:
        return e * t * n_out + a * t * n_out + scale
    weight = a * n_out * n_in if grad_in and a != e else 0
    return 2 * a * t * n_out + scale + weight


def readers(site: Site, outs: dict[str, int], width: int, x_bytes: int, grad_in: bool) -> int:
    """One input tensor (x_bytes of it saved only for its linears' weights) and the linears that read it (local
    name -> out features): what frozen weights drop and adapters add."""
    t, e, a, r, p = site.t, site.e, site.a, site.rank, site.dropout
    base = any(site.train(n + ".weight") for n in outs)
    adapters = [n for n in outs if n in site.adapted]
    if site.autocast:
        return _autocast_readers(site, outs, adapters, width, 0 if base else x_bytes, grad_in)
    shared = bool(adapters) and a == e and p == 0  # lora_A saves the input tensor itself, once for all of them
    quantized = site.quant_input and grad_in  # an old bitsandbytes MatMul4Bit keeps it (ctx.tensors = (A, B))
    delta = 0 if base or shared or quantized else -x_bytes
    if quantized and site.held is not None:
        site.held.append(site.e * site.t * width)  # the whole input, whoever else saves it
    for name in adapters:
        if p > 0:
            delta += a * t * width + (MASK_BYTES * t * width if grad_in else 0)
        elif a != e:
            delta += a * t * width  # the cast copy lora_A saves
        delta += a * t * r
        if site.dora:
            delta += dora_bytes(t, width, outs[name], e, a, p, grad_in)
    return delta


def _autocast_readers(site: Site, outs: dict[str, int], adapters: list[str], width: int, x_bytes: int,
                      grad_in: bool) -> int:
    """readers() under autocast on an fp32 stream: the input itself is saved by no adapter (each saves its own cast
    copy), dropout keeps its mask where the input needs a gradient, the cast weights their inputs' gradients need."""
    c, t, r = site.autocast, site.t, site.rank
    delta = -x_bytes
    for name in adapters:
        delta += c * t * width + c * t * r + c * outs[name] * r + (c * r * width if grad_in else 0)
        if site.dropout > 0 and grad_in:
            delta += MASK_BYTES * t * width
    return delta
