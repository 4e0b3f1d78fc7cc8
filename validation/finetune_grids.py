"""The cases validation/measure_finetune_activations.py measures: per family (or wiring) the fine-tunes of its grid.

Mode name -> a LoRA config (peft LoraConfig's keys; qlora: the base loaded in bitsandbytes NF4) or a list of
parameter globs to freeze. Needs torch (the families' configs are measure_activations.py's).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_activations as ma  # noqa: E402
from measure_new_families import NEW_FAMILIES  # noqa: E402

QV = ["q_proj", "v_proj"]
MLA_QV = ["q_b_proj", "kv_b_proj"]  # DeepSeek-V3 has no q_proj / v_proj: the up-projections of q and of k/v


def lora(r, targets, p=0.0, **extra):
    return {"r": r, "target_modules": targets, "lora_dropout": p, **extra}


def _short(targets) -> str:
    return targets if isinstance(targets, str) else ",".join(t.removesuffix("_proj") for t in targets)


def issue_grid(qv) -> dict:
    modes = {"full": None}
    for r, t, p in itertools.product((8, 64), (qv, "all-linear"), (0.0, 0.05)):
        modes[f"lora r{r} {_short(t)} p{p}"] = lora(r, t, p)
    for t, p in itertools.product((qv, "all-linear"), (0.0, 0.05)):
        modes[f"dora r8 {_short(t)} p{p}"] = lora(8, t, p, use_dora=True)
    # QLoRA: the base linears in bitsandbytes NF4 (double quantization), loaded as transformers loads them
    modes[f"qlora r8 {_short(qv)} p0.0"] = lora(8, qv, 0.0, qlora=True)
    modes["qlora r64 all-linear p0.05"] = lora(64, "all-linear", 0.05, qlora=True)
    return modes | FREEZES


FREEZES = {  # the measured models have 2 layers
    "frozen embeddings": ["model.embed_tokens.*"],
    "frozen first half": ["model.embed_tokens.*", "model.layers.0.*"],
    "frozen layer 0": ["model.layers.0.*"],
    "frozen attention": ["model.layers.*.self_attn.*"],
    "frozen all but head": ["model.*"],
}


def small_grid(qv, moe: bool) -> dict:
    """peft refuses lora_dropout > 0 on the fused experts all-linear reaches on an MoE model (ParamWrapper)."""
    p = 0.0 if moe else 0.05
    return {"full": None, f"lora r8 {_short(qv)} p0.0": lora(8, qv), f"lora r8 {_short(qv)} p0.05": lora(8, qv, 0.05),
            "lora r8 all-linear p0.0": lora(8, "all-linear"), f"lora r64 all-linear p{p}": lora(64, "all-linear", p),
            f"dora r8 {_short(qv)} p0.0": lora(8, qv, 0.0, use_dora=True)} | FREEZES


GRIDS = {"llama": issue_grid(QV), "qwen2": issue_grid(QV), "qwen3": issue_grid(QV),
         "qwen3_moe": small_grid(QV, True), "gemma3_text": small_grid(QV, False), "deepseek_v3": small_grid(MLA_QV, True),
         "gpt_oss": small_grid(QV, False)}  # not converted by peft: all-linear is the attention, dropout allowed

# The families outside Llama's module layout (zeroplan/memory/activations/layouts.py), each wiring of a layer once:
# phi (one LayerNorm read by attention and MLP; resid_pdrop 0.1 as phi-2's config.json has it), phi3 (fused
# qkv_proj, gate_up_proj), gpt_neox (parallel residual with two LayerNorms on the layer input; and sequential),
# falcon (parallel_attn with one LayerNorm and one k/v head: falcon-7b's wiring; new_decoder_architecture: ln_attn
# and ln_mlp, grouped k/v heads).
_NEOX = ma.FAMILIES["gpt_neox"][1]
_FALCON = ma.FAMILIES["falcon"][1]
LAYOUT_FAMILIES = {
    "phi": ("phi", NEW_FAMILIES["phi"][1] | dict(resid_pdrop=0.1)),
    "phi3": ma.FAMILIES["phi3"],
    "gpt_neox": ("gpt_neox", _NEOX),
    "gpt_neox-sequential": ("gpt_neox", _NEOX | dict(use_parallel_residual=False)),
    "falcon": ("falcon", _FALCON),
    "falcon-new": ("falcon", _FALCON | dict(new_decoder_architecture=True, num_kv_heads=2)),
}
# The names each of them gives what FREEZES names in Llama's layout
LAYOUT_NAMES = {"gpt_neox": {"model.embed_tokens": "gpt_neox.embed_in", "model.layers": "gpt_neox.layers",
                             "self_attn": "attention", "model.*": "gpt_neox.*"},
                "falcon": {"model.embed_tokens": "transformer.word_embeddings", "model.layers": "transformer.h",
                           "self_attn": "self_attention", "model.*": "transformer.*"}}
LAYOUT_QV = {"phi": QV, "phi3": ["qkv_proj"], "gpt_neox": ["query_key_value"], "falcon": ["query_key_value"]}
# Eager where full training's SDPA formula is off, which is not the fine-tune's rules: phi's partial rotary
# (validation/compare_new_families.py KNOWN_GAPS); Falcon's SDPA, never measured (measure_activations.py EXCLUDED;
# measured here it keeps 3 e T h a layer more than the formula with a k/v head per query head: v a view of the
# fused output, which stays alive whole, and the output's transposed copy for dense)
ATTENTION = {"phi": "eager", "falcon": "eager", "falcon-new": "eager"}


def layout_grid(family: str) -> dict:
    model_type = LAYOUT_FAMILIES[family][0]
    qv, names = LAYOUT_QV[model_type], LAYOUT_NAMES.get(model_type, {})
    grid = {mode: lora for mode, lora in small_grid(qv, False).items() if mode not in FREEZES}
    grid[f"qlora r8 {_short(qv)} p0.0"] = lora(8, qv, 0.0, qlora=True)
    grid["qlora r64 all-linear p0.05"] = lora(64, "all-linear", 0.05, qlora=True)
    return grid | {mode: [_renamed(g, names) for g in globs] for mode, globs in FREEZES.items()}


def _renamed(glob: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        glob = glob.replace(old, new)
    return glob


GRIDS |= {family: layout_grid(family) for family in LAYOUT_FAMILIES}
