"""Measure what fine-tuning modes keep, on CPU, with transformers, peft and bitsandbytes; write the data.

For tiny Llama-, Qwen2-, Mistral-, Gemma 2- and Phi-3-shaped models (the widths below):
  names    AutoModelForCausalLM.from_config(config).named_parameters(): every name and shape
  peft     get_peft_model(LoraConfig(r, target_modules, lora_dropout, use_dora, modules_to_save)), or the base
           with --freeze-style globs: trainable and total parameter counts; after one backward the bytes of every
           .grad; after one torch.optim.AdamW step the bytes of exp_avg + exp_avg_sq (the 0-d `step` tensors
           are counted apart); with the base in fp32 and in bf16 (peft's autocast_adapter_dtype keeps the
           adapters fp32)
  bnb      bitsandbytes.functional.quantize_4bit (nf4, fp4; double quant; quant_storage uint8 / bfloat16 /
           float32) and int8_vectorwise_quant on CPU: the bytes of the packed weight and of every QuantState tensor
  optim8   bitsandbytes.optim.AdamW8bit on CPU: the bytes of its state tensors per parameter after one step
Run (a venv with torch==2.13.0, transformers, peft, bitsandbytes):
    python validation/measure_finetune.py            # writes validation/finetune_measured.json
tests/test_finetune_validation.py compares zeroplan's figures with this file.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from pathlib import Path

import torch

torch.set_num_threads(1)
torch.manual_seed(0)

OUT = Path(__file__).resolve().parent / "finetune_measured.json"
COMMON = {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 128}
CONFIGS = {
    "llama": {"model_type": "llama", **COMMON},
    "qwen2": {"model_type": "qwen2", **COMMON},
    "mistral": {"model_type": "mistral", **COMMON},
    "gemma2": {"model_type": "gemma2", **COMMON, "head_dim": 16},
    "phi3": {"model_type": "phi3", **COMMON, "num_key_value_heads": 4, "pad_token_id": 0},
    "mixtral": {"model_type": "mixtral", **COMMON, "num_local_experts": 4, "num_experts_per_tok": 2},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 4, "n_head": 4, "vocab_size": 512, "n_positions": 128},
}
PEFT_CASES = [  # (name, family, LoraConfig kwargs or None, freeze globs)
    *[(f"{fam} r{r} {tname}", fam, {"r": r, "target_modules": targets}, ())
      for fam in ("llama", "qwen2") for r in (8, 64)
      for tname, targets in (("q,v", ["q_proj", "v_proj"]), ("all-linear", "all-linear"))],
    ("llama r8 q,v dropout 0.05", "llama", {"r": 8, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.05}, ()),
    ("llama r8 all-linear DoRA", "llama", {"r": 8, "target_modules": "all-linear", "use_dora": True}, ()),
    ("qwen2 r8 q,v modules_to_save lm_head", "qwen2",
     {"r": 8, "target_modules": ["q_proj", "v_proj"], "modules_to_save": ["lm_head"]}, ()),
    ("phi3 r8 all-linear", "phi3", {"r": 8, "target_modules": "all-linear"}, ()),
    ("gemma2 r16 all-linear", "gemma2", {"r": 16, "target_modules": "all-linear"}, ()),
    # all-linear on Mixtral also adapts the router and the fused experts (peft's target_parameters, a rank per
    # expert): zeroplan refuses it, so the attention linears are measured here.
    ("mixtral r8 q,k,v,o", "mixtral", {"r": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}, ()),
    ("gpt2 r8 all-linear", "gpt2", {"r": 8, "target_modules": "all-linear"}, ()),
    ("gpt2 r8 c_attn", "gpt2", {"r": 8, "target_modules": ["c_attn"]}, ()),
    ("llama frozen embeddings", "llama", None, ("model.embed_tokens.*",)),
    ("llama frozen first half", "llama", None, ("model.embed_tokens.*", "model.layers.0.*", "model.layers.1.*")),
    ("qwen2 frozen first half", "qwen2", None, ("model.embed_tokens.*", "model.layers.0.*", "model.layers.1.*")),
]
BNB_SHAPES = [(160, 64), (64, 160), (96, 64), (1000, 7)]  # (out, in); 7000 elements: a block and a nested block partial


def build(family: str, dtype: torch.dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(CONFIGS[family])
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    return AutoModelForCausalLM.from_config(config, dtype=dtype)


def names() -> dict:
    return {fam: [[n, list(p.shape)] for n, p in build(fam, torch.float32).named_parameters()] for fam in CONFIGS}


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def peft_case(family: str, lora: dict | None, freeze: tuple[str, ...], dtype: torch.dtype) -> dict:
    model = build(family, dtype)
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(**lora))
    else:
        for name, p in model.named_parameters():
            if any(fnmatch.fnmatchcase(name, g) for g in freeze):
                p.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    ids = torch.randint(0, 512, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    opt = torch.optim.AdamW(trainable, lr=1e-4)
    opt.step()
    states = [s for st in opt.state.values() for k, s in st.items() if k in ("exp_avg", "exp_avg_sq")]
    steps = [s for st in opt.state.values() for k, s in st.items() if k == "step"]
    all_params = {id(p): p for p in model.parameters()}
    return {"trainable_params": sum(p.numel() for p in trainable),
            "all_params": sum(p.numel() for p in all_params.values()),
            "param_bytes": _bytes(all_params.values()),
            "grad_bytes": _bytes(p.grad for p in trainable if p.grad is not None),
            "adamw_state_bytes": _bytes(states), "adamw_step_bytes": _bytes(steps)}


PRESETS = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "gemma2-9b", "phi-3-mini")
PRESET_LORA = [(8, ["q_proj", "v_proj"]), (16, "all-linear"), (64, "all-linear")]


def presets() -> list[dict]:
    """Full-size presets built on the meta device (no memory), with peft's adapters: trainable and total counts."""
    import yaml
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    rows = []
    root = Path(__file__).resolve().parent.parent / "configs" / "models"
    for name in PRESETS:
        cfg = dict(yaml.safe_load((root / f"{name}.yaml").read_text())["config"])
        for r, targets in PRESET_LORA:
            if name == "phi-3-mini" and targets != "all-linear":
                continue
            with torch.device("meta"):
                config = AutoConfig.for_model(cfg.pop("model_type") if "model_type" in cfg else config.model_type, **cfg)
                model = get_peft_model(AutoModelForCausalLM.from_config(config), LoraConfig(r=r, target_modules=targets))
            trainable, total = model.get_nb_trainable_parameters()
            rows.append({"preset": name, "r": r, "target_modules": targets, "trainable_params": trainable,
                         "all_params": total})
            print(rows[-1], file=sys.stderr)
    return rows


def bnb_storage() -> list[dict]:
    import bitsandbytes.functional as F

    rows = []
    for out_f, in_f in BNB_SHAPES:
        w = torch.randn(out_f, in_f, dtype=torch.bfloat16)
        for quant in ("nf4", "fp4"):
            for double in (False, True):
                for storage in (torch.uint8, torch.bfloat16, torch.float32):
                    packed, state = F.quantize_4bit(w, quant_type=quant, compress_statistics=double, quant_storage=storage)
                    tensors = [state.absmax, state.code] + ([state.offset, state.state2.absmax] if double else [])
                    rows.append({"shape": [out_f, in_f], "quant": quant, "double_quant": double,
                                 "storage": str(storage).removeprefix("torch."), "packed_bytes": _bytes([packed]),
                                 "state_bytes": _bytes(tensors),
                                 "nested_code_bytes": _bytes([state.state2.code]) if double else 0})
        cb, scb, _ = F.int8_vectorwise_quant(w.to(torch.float16))
        rows.append({"shape": [out_f, in_f], "quant": "int8", "packed_bytes": _bytes([cb]), "state_bytes": _bytes([scb])})
    return rows


def optim8() -> list[dict]:
    import bitsandbytes as bnb

    rows = []
    for numel in (1000, 4095, 4096, 5000, 65536):
        p = torch.nn.Parameter(torch.randn(numel))
        p.grad = torch.randn(numel)
        opt = bnb.optim.AdamW8bit([p])
        opt.step()
        state = opt.state[p]
        per = {k: _bytes([v]) for k, v in state.items() if torch.is_tensor(v) and k not in ("qmap1", "qmap2")}
        rows.append({"numel": numel, "state_bytes": sum(per.values()), "tensors": per})
    return rows


def main() -> None:
    data = {"names": names(), "peft": [], "bnb": [], "optim8": []}
    import bitsandbytes
    import peft
    import transformers

    data["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                        "bitsandbytes": bitsandbytes.__version__}
    for name, family, lora, freeze in PEFT_CASES:
        for dtype in (torch.float32, torch.bfloat16):
            row = {"case": name, "family": family, "lora": lora, "freeze": list(freeze),
                   "dtype": str(dtype).removeprefix("torch."), **peft_case(family, lora, freeze, dtype)}
            data["peft"].append(row)
            print(row, file=sys.stderr)
    data["presets"] = presets()
    try:
        data["bnb"] = bnb_storage()
    except Exception as exc:  # noqa: BLE001 - recorded: bitsandbytes without a CPU backend
        data["bnb_error"] = repr(exc)
    try:
        data["optim8"] = optim8()
    except Exception as exc:  # noqa: BLE001
        data["optim8_error"] = repr(exc)
    OUT.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
