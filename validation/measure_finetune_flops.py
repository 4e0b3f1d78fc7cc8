"""Count the FLOPs a fine-tune's forward and backward run, on CPU, with transformers, peft and torch's FlopCounterMode.

A tiny Llama-shaped model (the widths below, eager attention so the score matmuls are counted whole, as zeroplan
counts eager attention), a micro-batch of 2 x 32 tokens: full training, LoRA (q,v and all-linear, dropout 0 and
0.05), DoRA (q,v with dropout 0.05, all-linear without), frozen embeddings, frozen embeddings and first half.
FlopCounterMode (torch/utils/flop_counter.py) counts matmul-like ops only (mm, addmm, bmm, sdpa), so embedding
lookups and elementwise ops are 0, as 6N's convention leaves elementwise ops out (it does count the embedding
parameters: tests/test_finetune_flops.py takes that term out before comparing).
Run (a venv with torch==2.13.0, transformers, peft; /work/venv-lora on the build machine):
    python validation/measure_finetune_flops.py        # writes validation/finetune_flops.json
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

torch.set_num_threads(1)
torch.manual_seed(0)

OUT = Path(__file__).resolve().parent / "finetune_flops.json"
CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 128}
BATCH, SEQ = 2, 32
QV, ALL = ["q_proj", "v_proj"], "all-linear"
CASES = [
    {"case": "full"},
    {"case": "lora r8 q,v p0", "lora": {"r": 8, "target_modules": QV}},
    {"case": "lora r8 all-linear p0.05", "lora": {"r": 8, "target_modules": ALL, "lora_dropout": 0.05}},
    {"case": "lora r16 all-linear p0", "lora": {"r": 16, "target_modules": ALL}},
    {"case": "dora r8 q,v p0.05", "lora": {"r": 8, "target_modules": QV, "lora_dropout": 0.05, "use_dora": True}},
    {"case": "dora r8 all-linear p0", "lora": {"r": 8, "target_modules": ALL, "use_dora": True}},
    {"case": "frozen embeddings", "freeze": ["model.embed_tokens.*"]},
    {"case": "frozen embeddings and first half", "freeze": ["model.embed_tokens.*", "model.layers.0.*",
                                                            "model.layers.1.*"]},
]


def build(case: dict):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**CONFIG)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config)
    if "lora" in case:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(**case["lora"]))
    for name, p in model.named_parameters():
        if any(fnmatch.fnmatchcase(name, g) for g in case.get("freeze", ())):
            p.requires_grad_(False)
    return model.train()


def measure(case: dict) -> dict:
    model = build(case)
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ))
    with FlopCounterMode(display=False) as fwd:
        loss = model(input_ids=ids, labels=ids).loss
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    return {**case, "tokens": BATCH * SEQ, "forward_flops": fwd.get_total_flops(),
            "backward_flops": bwd.get_total_flops()}


def main() -> None:
    import peft
    import transformers

    rows = [measure(case) for case in CASES]
    OUT.write_text(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                               "peft": peft.__version__, "config": CONFIG, "batch": BATCH, "seq": SEQ,
                               "rows": rows}, indent=1) + "\n")  # fmt: skip
    for row in rows:
        print(f"{row['case']:36} fwd {row['forward_flops']:>12,} bwd {row['backward_flops']:>12,}")


if __name__ == "__main__":
    main()
