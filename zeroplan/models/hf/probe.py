"""One meta-device forward and loss of a shallow copy of the model, recorded with saved_tensors_hooks.

The copy is the model transformers builds (real widths) cut to two layers of each kind (so that what layers
share, the rotary tables, shows as shared; one where a kind has a single layer). torch.autograd.graph.saved_tensors_hooks sees every tensor
autograd saves for backward; each is counted once per storage (`untyped_storage()` returns the same object for
one storage while it lives, so a tensor saved twice, or two views of one tensor, are one entry; the recorder
keeps them alive so no identity is reused), parameters excluded. Regions: before the first layer (embedding),
inside layer i, after the last layer (final norm, LM head input) and the loss (model.loss_function on the
logits). As validation/measure_activations.py does, dropout runs as CUDA's native_dropout (1-byte mask) and
LayerNorm's mean/rstd count as fp32. MoE: transformers 5 runs experts as one grouped matmul over the b s k
routed rows; on meta the rows' assignment has no values, so the figure is the same for any routing and equals
the mean b s k / E tokens per expert. Imports torch; loaded by zeroplan.models.hf only.
"""

from __future__ import annotations


import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from zeroplan.errors import SpecError
from zeroplan.models.hf.records import MeasuredActivations, NotMeasurable
from zeroplan.models.hf.attention import EAGER, FLASH, CoreMarks, register
from zeroplan.models.hf.build import build_on_meta, decoder_layers, hf_config

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
HALF = (torch.bfloat16, torch.float16)
FP32_BYTES = 4
COPY_LAYERS = 2  # layers kept of each kind: two, so that what they share is seen as shared


GROUPED_MM = tuple(f for f in (getattr(torch, "_grouped_mm", None), getattr(nn.functional, "grouped_mm", None)) if f)


class AsOnTheGpu(TorchFunctionMode):
    """Ops whose meta (or CPU) behaviour differs from the GPU run being planned, routed to what keeps the same tensors.

    F.dropout: CUDA calls at::native_dropout (a bool mask); elsewhere it multiplies by a mask of the input dtype.
    grouped_mm: the meta kernel takes bf16 only; other dtypes go to transformers' own fallback op
    (transformers.integrations.moe `transformers::grouped_mm_fallback`), which saves the same input and weight.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in GROUPED_MM and args[0].dtype != torch.bfloat16 and kwargs.get("bias") is None:
            offs = kwargs.get("offs", args[2] if len(args) > 2 else None)
            return torch.ops.transformers.grouped_mm_fallback(args[0], args[1], offs)
        if func is nn.functional.dropout:
            x = args[0]
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            if training and 0.0 < p < 1.0:
                return torch.native_dropout(x, p, True)[0]
        return func(*args, **kwargs)


class Recorder:
    """Which storages autograd saves, their bytes, and in which region; what checkpointed layers would hold."""

    def __init__(self, model: nn.Module):
        self.params = {id(p.untyped_storage()) for p in model.parameters()}
        self.keep: list = []  # the storages seen, kept alive so that id() stays theirs
        self.bytes: dict[int, int] = {}
        self.regions: dict[int, set] = {}
        self.in_core: dict[int, int] = {}  # storage -> layer, saved inside an attention core
        self.core_inputs: dict[int, tuple[object, int]] = {}  # storage -> (layer, bytes) of a core's q, k, v
        self.core_masks: dict[int, int] = {}
        self.layer_inputs: dict[int, int] = {}  # layer -> storage of its hidden-state input
        self.input_bytes = 0
        self.held: dict[int, int] = {}
        self.region: object = "embedding"
        self.core = 0
        self.layernorm = 0

    def _key(self, t: torch.Tensor) -> int:
        storage = t.untyped_storage()
        self.keep.append(storage)
        return id(storage)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = self._key(t)
        if key in self.params:
            return t
        nbytes = t.untyped_storage().nbytes()
        if self.layernorm and t.dtype in HALF and t.shape[-1:] == (1,):
            nbytes = t.numel() * FP32_BYTES  # mean / rstd: fp32 on CUDA
        self.bytes.setdefault(key, nbytes)
        self.regions.setdefault(key, set()).add(self.region)
        if self.core and isinstance(self.region, int):
            self.in_core.setdefault(key, self.region)
        return t

    def enter_core(self, query, key, value, mask) -> None:
        """A core starts: its q, k, v (what a selective recompute keeps) and its mask (what it re-reads)."""
        self.core += 1
        for t in (query, key, value):
            self.core_inputs.setdefault(self._key(t), (self.region, t.untyped_storage().nbytes()))
        if isinstance(mask, torch.Tensor):
            self.core_masks.setdefault(self._key(mask), mask.untyped_storage().nbytes())

    def leave_core(self) -> None:
        self.core -= 1

    def enter_layer(self, index: int, args, kwargs) -> None:
        self.region = index
        hidden = args[0] if args else kwargs.get("hidden_states")
        self.layer_inputs[index] = self._key(hidden)
        self.input_bytes = max(self.input_bytes, hidden.untyped_storage().nbytes())
        for t in _tensors((args[1:], {k: v for k, v in kwargs.items() if k != "hidden_states"})):
            if (key := self._key(t)) not in self.params:
                self.held.setdefault(key, t.untyped_storage().nbytes())

    def only(self, region) -> dict[int, int]:
        return {k: n for k, n in self.bytes.items() if self.regions[k] == {region}}


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _signature(layer: nn.Module, per_layer: dict[str, list], index: int) -> tuple:
    """What tells one layer's kind: its parameters' names and shapes and its entry in every per-layer config list
    (layer_types, no_rope_layers, ...)."""
    entries = tuple((key, repr(values[index])) for key, values in sorted(per_layer.items()))
    return entries, tuple((name, tuple(p.shape)) for name, p in layer.named_parameters())


def shallow_copy(model: nn.Module, text) -> tuple[tuple[int, ...], str]:
    """Cut the built model down to two layers of each kind (one where a kind has one), in place; for each real
    layer, the kept layer that stands for it (its position in the copy), and the copy in words.

    The layers are the built model's own (transformers builds a dense-then-MoE or hybrid stack by layer index;
    cutting the stack afterwards keeps each kind as built), and the config's per-layer lists are cut to match,
    as the model's forward reads them by position.
    """
    layers = decoder_layers(model)
    depth = len(layers)
    if not layers:  # blocks not derived from GradientCheckpointingLayer (older ports: CTRL, XLNet, ...)
        raise NotMeasurable(f"model_type {text.model_type!r}: transformers' model has no GradientCheckpointingLayer "
                            "blocks to measure one by one; activations not measurable")
    per_layer = {k: v for k, v in vars(text).items() if isinstance(v, list) and len(v) == depth and depth > 1}
    kinds: dict[tuple, list[int]] = {}
    for i, layer in enumerate(layers):
        kinds.setdefault(_signature(layer, per_layer, i), []).append(i)
    represented_by = {}  # real layer -> the kept layer of its kind that stands for it
    for indices in kinds.values():  # two of each kind that has two: a storage two layers save is shared, not per layer
        picked = indices[:COPY_LAYERS]
        half = -(-len(indices) // len(picked))
        represented_by |= {index: picked[j // half] for j, index in enumerate(indices)}
    keep = sorted(set(represented_by.values()))  # in the model's order
    layer_of = tuple(keep.index(represented_by[i]) for i in range(depth))
    how = (f"{len(keep)} layer{'s' * (len(keep) > 1)}" if len(kinds) == 1 else
           f"{len(keep)} layers, up to two of each of its {len(kinds)} layer kinds (layers {', '.join(map(str, keep))})")
    holder = next(m for m in model.modules() if isinstance(m, nn.ModuleList) and any(c is layers[0] for c in m))
    kept = [layers[i] for i in keep]
    for i in reversed(range(len(holder))):
        del holder[i]
    holder.extend(kept)
    try:
        text.num_hidden_layers = len(keep)
        for key, values in per_layer.items():
            setattr(text, key, [values[i] for i in keep])
    except (NotImplementedError, AttributeError, TypeError, ValueError) as exc:  # a config that refuses the depth
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise NotMeasurable(f"model_type {text.model_type!r}: its config cannot be cut to the copy's depth ({first}); "
                            "activations not measurable") from None
    return layer_of, how


def measure(data: dict, *, micro_batch: int, seq_len: int, dtype: str, flash: bool) -> MeasuredActivations:
    torch.set_num_threads(1)
    register()
    config = hf_config(data)
    try:  # the count built it already; with the recording attention some models do not build (GPT-Neo, GIT)
        model = build_on_meta(config, DTYPES[dtype], attn_implementation=FLASH if flash else EAGER)
    except SpecError:
        raise NotMeasurable(f"model_type {data.get('model_type')!r}: transformers does not build it with the attention "
                            "the measurement records (its own attention code); activations not measurable") from None
    layer_of, copy = shallow_copy(model, config.get_text_config())
    model.train()
    rec = Recorder(model)
    layers = decoder_layers(model)
    if len(layers) != len(set(layer_of)):
        raise NotMeasurable(f"model_type {data.get('model_type')!r}: found {len(layers)} decoder layers in the copy of "
                        f"{len(set(layer_of))}; its activations cannot be measured by layer")
    hooks = []
    for i, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(lambda m, a, k, i=i: rec.enter_layer(i, a, k), with_kwargs=True))
        hooks.append(layer.register_forward_hook(lambda *_: setattr(rec, "region", "head")))
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            hooks.append(module.register_forward_pre_hook(lambda *_: setattr(rec, "layernorm", rec.layernorm + 1)))
            hooks.append(module.register_forward_hook(lambda *_: setattr(rec, "layernorm", rec.layernorm - 1)))
    marks = CoreMarks.enter, CoreMarks.leave
    CoreMarks.enter, CoreMarks.leave = rec.enter_core, rec.leave_core
    b, s = micro_batch, seq_len
    ids = torch.zeros((b, s), dtype=torch.long, device="meta")
    mask = torch.ones((b, s), dtype=torch.bool, device="meta")  # given, so no packed-sequence check reads values
    try:
        with AsOnTheGpu(), torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            rec.region = "loss"
            model.loss_function(logits, ids, vocab_size=logits.shape[-1])
    except (RuntimeError, NotImplementedError, AttributeError, IndexError, KeyError, TypeError, ValueError,
            ArithmeticError, AssertionError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise NotMeasurable(f"model_type {data.get('model_type')!r}: its forward cannot run on the meta device "
                            f"({first}); activations not measurable") from None
    finally:
        for h in hooks:
            h.remove()
        CoreMarks.enter, CoreMarks.leave = marks
    return _result(rec, logits, layer_of, copy, flash)


def _result(rec: Recorder, logits: torch.Tensor, layer_of: tuple[int, ...], copy: str, flash: bool) -> MeasuredActivations:
    n = len(set(layer_of))
    per_layer = [rec.only(i) for i in range(n)]
    single = {k for region in [*range(n), "embedding", "head", "loss"] for k in rec.only(region)}
    logits_key = id(logits.untyped_storage())
    how = (f"activations measured: one meta-device forward and loss of a copy with the real widths and {copy}, "
           "saved tensors recorded (torch.autograd.graph.saved_tensors_hooks) and scaled to the real depth")
    kernel = ("attention as FlashAttention / SDPA flash saves it: q, k, v, output, fp32 log-sum-exp"
              if flash else "eager attention (the model's eager_attention_forward): a x s x s scores kept")
    return MeasuredActivations(
        layer_bytes=tuple(sum(layer.values()) for layer in per_layer),
        layer_of=layer_of,
        layer_input_bytes=rec.input_bytes,
        layer_input_saved=tuple(rec.layer_inputs.get(i) in layer for i, layer in enumerate(per_layer)),
        core_bytes=tuple(sum(n for k, n in layer.items() if k in rec.in_core and k not in rec.core_inputs)
                         for layer in per_layer),
        core_input_bytes=tuple(sum(n for k, (region, n) in rec.core_inputs.items()
                                   if region == i and k not in rec.bytes) for i in range(n)),
        core_mask_bytes=sum(n for k, n in rec.core_masks.items() if k not in rec.bytes),
        held_bytes=sum(n for k, n in rec.held.items() if k not in rec.bytes),
        shared_bytes=sum(n for k, n in rec.bytes.items() if k not in single),
        embedding_bytes=sum(rec.only("embedding").values()),
        head_bytes=sum(rec.only("head").values()),
        logits_bytes=0 if logits_key in rec.bytes else logits.untyped_storage().nbytes(),
        loss_saved_bytes=sum(rec.only("loss").values()),
        loss_copy_bytes=logits.numel() * FP32_BYTES if logits.dtype in HALF else 0,
        notes=(how, kernel, "MoE (if any): grouped experts over the b s k routed rows, the same bytes for any "
               "routing: the mean b s k / E tokens per expert"),
    )
