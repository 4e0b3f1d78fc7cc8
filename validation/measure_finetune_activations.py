"""Activation bytes of fine-tunes (LoRA, DoRA, QLoRA, frozen parts) on CPU, measured as validation/measure_activations.py does.

Same counting (unique storages autograd saves and still holds when the forward ends, parameters excluded,
CUDA-like dropout masks, the logits and the fp32 loss copy, checkpoint-held arguments, the recompute of one layer
less what the layer was handed), with peft 0.21.2 (bitsandbytes 0.50.2 for QLoRA) on tiny models of thirteen families and wirings:
  llama, qwen2, qwen3 (qk-norm): the issue's grid: LoRA r in {8, 64}, targets q,v and all-linear, lora_dropout 0 and
      0.05; DoRA r 8; QLoRA (NF4, double quantization); frozen embeddings, a frozen first half, a frozen layer 0
      (embeddings trainable), frozen attention blocks, everything but the head frozen;
  qwen3_moe, gemma3_text, gpt_oss, deepseek_v3 (MLA, a dense layer then routed and shared experts): a smaller grid;
  phi, phi3, gpt_neox (and gpt_neox-sequential), falcon (and falcon-new): the smaller grid, two QLoRA rows and the
      freezes in their own module names (LAYOUT_FAMILIES);
checkpointing none and full; bf16 (adapters fp32, peft's autocast_adapter_dtype) and fp32. Each row also records
what one backward and one torch.optim.AdamW step keep: peft's trainable count, gradient bytes, AdamW m + v bytes.
    python validation/measure_finetune_activations.py [--family F ...]   # (re)writes those rows of
                                                                          # validation/finetune_activations.json
    python validation/measure_finetune_activations.py --all-linear-moe   # peft's all-linear counts on 9 MoE families
zeroplan's figures for these rows: validation/compare_finetune_activations.py (and the tables of docs/finetune.md).
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import gc
import itertools
import json
import sys
import tempfile
import warnings
import weakref
from pathlib import Path

import torch
import transformers
from transformers.modeling_layers import GradientCheckpointingLayer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_activations as ma  # noqa: E402
from finetune_grids import ATTENTION, GRIDS, LAYOUT_FAMILIES  # noqa: E402
from measure_new_families import NEW_FAMILIES  # noqa: E402

torch.set_num_threads(1)
OUT = Path(__file__).resolve().parent / "finetune_activations.json"
SEQ, BATCH = 64, 2


def fresh(family: str, dtype: str, checkpointing):
    return ma.build.__wrapped__(family, dtype, ATTENTION.get(family, "sdpa"), checkpointing)


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


def alive_recompute_layer(rec: ma.Recorder, alive: set[int], handed: set[int]) -> int:
    """Recorder.recompute_layer_bytes over the storages still alive, less what a layer was handed (rotary tables,
    masks: a recompute re-reads them, as measure_new_families.py counts it)."""
    per: dict[int, int] = {}
    for ptr, layers in rec.layers_of.items():
        if ptr in alive and ptr not in handed and len(layers) == 1:
            (layer,) = layers
            if ptr != rec.layer_inputs.get(layer):
                per[layer] = per.get(layer, 0) + rec.saved[ptr]
    return max(per.values(), default=0)


def _handed(handed: set[int], module, args, kwargs) -> None:
    handed.update(t.untyped_storage().data_ptr() for t in ma._tensors((args[1:], kwargs)))


def measure(model, arch, checkpointing):
    """As measure_activations.measure, counting only saved tensors still held by the graph when the forward ends:
    DoRA builds its lora_B(lora_A(I)) weight with a graph it uses only detached, freed before the backward.
    Returns the Measurement, the bytes each layer alone saved (its input included) and the loss."""
    rec = ma.RECORDER = ma.Recorder(model)
    held_refs, keep, handed = [], [], set()  # keep: every saved tensor until the forward ends (no address reused)

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
        hooks.append(layer.register_forward_pre_hook(functools.partial(_handed, handed), with_kwargs=True))
        hooks.append(layer.register_forward_hook(lambda *_: setattr(rec, "layer", None)))
    for module in model.modules():  # LayerNorm's mean and rstd count as fp32, CUDA's accumulate type (as ma does)
        if isinstance(module, torch.nn.LayerNorm):
            hooks.append(module.register_forward_pre_hook(lambda m, _: rec.module_stack.append(m)))
            hooks.append(module.register_forward_hook(lambda *_: rec.module_stack.pop() and None))
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
    per_layer: dict[int, int] = {}
    for ptr, where in rec.layers_of.items():
        if ptr in rec.saved and len(where) == 1:
            (layer,) = where
            per_layer[layer] = per_layer.get(layer, 0) + rec.saved[ptr]
    m = ma.Measurement(saved=sum(rec.saved.values()), held=sum(held.values()),
                       logits=0 if logits.untyped_storage().data_ptr() in rec.saved else logits.untyped_storage().nbytes(),
                       copy=logits.numel() * 4 if logits.dtype != torch.float32 else 0,
                       recompute_layer=alive_recompute_layer(rec, alive, handed), recompute_core=0)
    return m, [per_layer.get(i, 0) for i in range(len(layers))], out.loss


def recompute_reference(family: str, dtype: str, mode):
    """The layer recompute of a checkpointed run, measured without checkpointing on the same fine-tune with the
    embeddings' output requiring grad: transformers' gradient_checkpointing_enable calls enable_input_require_grads
    (modeling_utils.py), so under checkpointing a gradient flows from the first layer on, frozen or not."""
    model, arch = fresh(family, dtype, ma.Checkpointing.none)
    model = prepare(model, mode)
    model.enable_input_require_grads()
    return measure(model, arch, ma.Checkpointing.none)[0]


def states(model, loss) -> dict:
    """One backward and one AdamW step: peft's trainable count, gradient bytes, AdamW m + v bytes (the 0-d step
    tensor AdamW keeps per parameter is left out, as tests/test_finetune_validation.py leaves it)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:  # a tied head frozen with the rest: nothing to train
        return {"trainable_params": 0, "grad_bytes": 0, "adamw_state_bytes": 0}
    loss.backward()
    grads = sum(p.grad.untyped_storage().nbytes() for p in trainable if p.grad is not None)
    opt = torch.optim.AdamW(trainable, lr=1e-3)
    opt.step()
    moments = sum(s[k].untyped_storage().nbytes() for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq"))
    # gpt-oss's sinks: the SDPA stand-in drops them (measure_activations._core), so they get no gradient and AdamW
    # skips them; recorded so that the comparison adds back what a real run's gradient and states would hold
    unused = sum(p.numel() * p.element_size() for p in trainable if p.grad is None)
    return {"trainable_params": sum(p.numel() for p in trainable), "grad_bytes": grads, "adamw_state_bytes": moments,
            "unused_grad_bytes": unused}


def run(family: str) -> list[dict]:
    rows = []
    for dtype, (mode_name, mode) in itertools.product(("bf16", "fp32"), GRIDS[family].items()):
        reference = None
        for ckpt in (ma.Checkpointing.none, ma.Checkpointing.full):
            model, arch = fresh(family, dtype, ckpt)
            model = prepare(model, mode)
            if ckpt is ma.Checkpointing.full and not model.is_gradient_checkpointing:  # a reloaded base
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            m, per_layer, loss = measure(model, arch, ckpt)
            if ckpt is ma.Checkpointing.full:
                reference = recompute_reference(family, dtype, mode)
            reference = reference or m
            row = {"family": family, "dtype": dtype, "mode": mode_name, "checkpointing": ckpt.value,
                   "attention": ATTENTION.get(family, "sdpa"),
                   "lora": {k: v for k, v in mode.items()} if isinstance(mode, dict) else None,
                   "freeze": mode if isinstance(mode, list) else [],
                   "seq_len": SEQ, "micro_batch": BATCH, "measured": m.total(ckpt, reference),
                   "saved": m.saved, "held": m.held, "logits": m.logits, "copy": m.copy,
                   "recompute_layer": reference.recompute_layer, "layers": per_layer}
            if ckpt is ma.Checkpointing.none:
                row |= states(model, loss)
            rows.append(row)
            print({k: v for k, v in row.items() if k not in ("lora", "freeze")}, file=sys.stderr)
    return rows


_MOE_BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1000, pad_token_id=0, bos_token_id=0, eos_token_id=0)
ALL_LINEAR_MOE = {  # peft's all-linear on MoE families (transformers 5 fuses the experts into 3-D parameters)
    "mixtral": _MOE_BASE | dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": _MOE_BASE | dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                  shared_expert_intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[]),
    "granitemoe": _MOE_BASE | dict(num_local_experts=4, num_experts_per_tok=2),
    "deepseek_v2": _MOE_BASE | dict(num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                                    qk_nope_head_dim=16, v_head_dim=24, n_routed_experts=4, n_shared_experts=1,
                                    moe_intermediate_size=32, first_k_dense_replace=1, num_experts_per_tok=2,
                                    n_group=1, topk_group=1),
    **{f: NEW_FAMILIES[f][1] for f in ("qwen3_moe", "gpt_oss", "deepseek_v3", "glm4_moe", "llama4_text")},
}


def all_linear_moe() -> dict:
    """peft's trainable and total counts for r 8 all-linear, and the modules it adapted (one layer's, by last name)."""
    from peft import LoraConfig, get_peft_model

    out = {}
    for family, kw in ALL_LINEAR_MOE.items():
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(family, **kw))
        model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear"))
        trainable, total = model.get_nb_trainable_parameters()
        adapted = sorted({n.split(".lora_A")[0].replace("base_model.model.", "").replace(".base_layer", "")
                          for n, _ in model.named_parameters() if ".lora_A" in n})
        out[family] = {"config": kw, "r": 8, "trainable_params": trainable, "all_params": total, "adapted": adapted}
        print(family, out[family]["trainable_params"], file=sys.stderr)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", choices=list(GRIDS))
    parser.add_argument("--print", action="store_true", help="print the rows; do not write the file")
    parser.add_argument("--all-linear-moe", action="store_true", help="only (re)measure peft's all-linear on MoE")
    args = parser.parse_args(argv)
    ma.FAMILIES.update(NEW_FAMILIES)
    ma.FAMILIES.update(LAYOUT_FAMILIES)
    if args.all_linear_moe:
        data = json.loads(OUT.read_text())
        data["all_linear_moe"] = all_linear_moe()
        OUT.write_text(json.dumps(data, indent=1) + "\n")
        return
    families = args.family or list(GRIDS)
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    for family in families:
        rows = run(family)
        if not args.print:
            write(family, rows)


def write(family: str, rows: list[dict]) -> None:
    """Replace `family`'s rows of the JSON (written after each family)."""
    old = json.loads(OUT.read_text()) if OUT.exists() else {"rows": []}
    kept = [r for r in old["rows"] if r["family"] != family and r["family"] in GRIDS]
    config = {f: dict(ma.FAMILIES[f][1]) | ({"model_type": ma.FAMILIES[f][0]} if ma.FAMILIES[f][0] != f else {})
              for f in GRIDS}
    OUT.write_text(json.dumps({"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                            "peft": _version("peft"), "bitsandbytes": _version("bitsandbytes")},
                               "config": config, "rows": kept + rows,
                               "all_linear_moe": old.get("all_linear_moe", {})}, indent=1) + "\n")


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
