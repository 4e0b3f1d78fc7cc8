"""Activation bytes of fine-tunes (LoRA, frozen parts) on CPU, measured as validation/measure_activations.py does.

Same counting (unique storages autograd saves and still holds when the forward ends, parameters excluded,
CUDA-like dropout masks, the logits and the fp32 loss copy, checkpoint-held arguments, the recompute of one layer), on Llama- and Qwen2-shaped models with
peft's LoRA (r in {8, 64}; targets q,v and all-linear; lora_dropout 0 and 0.05) and with frozen embeddings or a
frozen first half; DoRA (r 8); checkpointing none and full; bf16 (adapters fp32, peft's autocast_adapter_dtype) and fp32.
    python validation/measure_finetune_activations.py     # writes validation/finetune_activations.json
"""

from __future__ import annotations

import fnmatch
import functools
import gc
import itertools
import tempfile
import json
import sys
import warnings
import weakref
from pathlib import Path

import torch
import transformers
from transformers.modeling_layers import GradientCheckpointingLayer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_activations as ma  # noqa: E402

torch.set_num_threads(1)
OUT = Path(__file__).resolve().parent / "finetune_activations.json"
SEQ, BATCH = 64, 2
MODES = {
    "full": None,
    **{f"lora r{r} {t} p{p}": {"r": r, "target_modules": targets, "lora_dropout": p}
       for r, (t, targets), p in itertools.product((8, 64), (("q,v", ["q_proj", "v_proj"]), ("all-linear", "all-linear")),
                                                   (0.0, 0.05))},
    **{f"dora r8 {t} p{p}": {"r": 8, "target_modules": targets, "lora_dropout": p, "use_dora": True}
       for (t, targets), p in itertools.product((("q,v", ["q_proj", "v_proj"]), ("all-linear", "all-linear")), (0.0, 0.05))},
    # QLoRA: the base linears in bitsandbytes NF4 (double quantization), loaded as transformers loads them
    **{f"qlora r{r} {t} p{p}": {"r": r, "target_modules": targets, "lora_dropout": p, "qlora": True}
       for r, (t, targets), p in ((8, ("q,v", ["q_proj", "v_proj"]), 0.0), (64, ("all-linear", "all-linear"), 0.05))},
    "frozen embeddings": ("model.embed_tokens.*",),
    "frozen first half": ("model.embed_tokens.*", "model.layers.0.*"),  # the measured models have 2 layers
}


def fresh(family: str, dtype: str, checkpointing):
    return ma.build.__wrapped__(family, dtype, "sdpa", checkpointing)


def quantized(model, dtype: torch.dtype):
    """`model` saved and loaded again with BitsAndBytesConfig(load_in_4bit, nf4, double quant) on the CPU."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    folder = tempfile.mkdtemp()
    model.save_pretrained(folder)
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=dtype)
    return AutoModelForCausalLM.from_pretrained(folder, quantization_config=config, dtype=dtype, device_map="cpu",
                                                attn_implementation=model.config._attn_implementation).train()


def prepare(model, mode):
    if isinstance(mode, dict):
        from peft import LoraConfig, get_peft_model

        mode = dict(mode)
        if mode.pop("qlora", False):
            model = quantized(model, next(model.parameters()).dtype)
        return get_peft_model(model, LoraConfig(**mode))
    for name, p in model.named_parameters():
        if mode and any(fnmatch.fnmatchcase(name, g) for g in mode):
            p.requires_grad_(False)
    return model


class Held:
    """What a pack hook hands autograd: the graph keeps it while the saved tensor can still be used."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


def alive_recompute_layer(rec: ma.Recorder, alive: set[int]) -> int:
    """Recorder.recompute_layer_bytes over the storages still alive."""
    per: dict[int, int] = {}
    for ptr, layers in rec.layers_of.items():
        if ptr in alive and len(layers) == 1:
            (layer,) = layers
            if ptr != rec.layer_inputs.get(layer):
                per[layer] = per.get(layer, 0) + rec.saved[ptr]
    return max(per.values(), default=0)


def measure(model, arch, checkpointing) -> ma.Measurement:
    """As measure_activations.measure, counting only saved tensors still held by the graph when the forward ends:
    DoRA builds its lora_B(lora_A(I)) weight with a graph it uses only detached, freed before the backward."""
    rec = ma.RECORDER = ma.Recorder(model)
    held_refs, keep = [], []  # keep: every saved tensor until the forward ends, so no freed address is reused

    def pack(t):
        keep.append(t.untyped_storage())  # the storage alone: a tensor would keep its graph alive
        rec.pack(t)
        holder = Held(t)
        held_refs.append(weakref.ref(holder))
        return holder
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    hooks = []
    for i, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(functools.partial(ma._enter_layer, rec, i), with_kwargs=True))
        hooks.append(layer.register_forward_hook(lambda *_: setattr(rec, "layer", None)))
    torch.manual_seed(1)
    ids = torch.randint(1, arch.vocab_size, (BATCH, SEQ))
    try:
        with ma.cuda_like_dropout(), torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.tensor):
            out = model(input_ids=ids, labels=ids.clone(), use_cache=False)
    finally:
        ma.RECORDER = None
        for h in hooks:
            h.remove()
    gc.collect()
    alive = {r().tensor.untyped_storage().data_ptr() for r in held_refs if r() is not None}
    keep.clear()
    rec.saved = {p: n for p, n in rec.saved.items() if p in alive}
    logits = out.logits
    held = {p: n for p, n in rec.held.items() if p not in rec.saved}
    if checkpointing is ma.Checkpointing.none:
        held = {}
    return ma.Measurement(saved=sum(rec.saved.values()), held=sum(held.values()),
                          logits=0 if logits.untyped_storage().data_ptr() in rec.saved else logits.untyped_storage().nbytes(),
                          copy=logits.numel() * 4 if logits.dtype != torch.float32 else 0,
                          recompute_layer=alive_recompute_layer(rec, alive), recompute_core=0)


def main() -> None:
    rows = []
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    for family, dtype, mode_name in itertools.product(("llama", "qwen2"), ("bf16", "fp32"), MODES):
        reference = None
        for ckpt in (ma.Checkpointing.none, ma.Checkpointing.full):
            model, arch = fresh(family, dtype, ckpt)
            model = prepare(model, MODES[mode_name])
            if ckpt is ma.Checkpointing.full and not model.is_gradient_checkpointing:  # a reloaded base
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            m = measure(model, arch, ckpt)
            reference = reference or m
            rows.append({"family": family, "dtype": dtype, "mode": mode_name, "checkpointing": ckpt.value,
                         "seq_len": SEQ, "micro_batch": BATCH, "measured": m.total(ckpt, reference),
                         "saved": m.saved, "held": m.held, "logits": m.logits, "copy": m.copy,
                         "recompute_layer": reference.recompute_layer})
            print(rows[-1], file=sys.stderr)
    OUT.write_text(json.dumps({"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                               "config": {f: ma.FAMILIES[f][1] for f in ("llama", "qwen2")}, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
