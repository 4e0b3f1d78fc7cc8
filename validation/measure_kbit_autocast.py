"""QLoRA with peft's prepare_model_for_kbit_training under autocast, measured on CPU: writes kbit_autocast.json.

The most common QLoRA run (transformers' bitsandbytes quantizer, prepare_model_for_kbit_training, get_peft_model,
HF Trainer with bf16=True: torch.autocast over the forward) leaves an fp32 embedding, fp32 norms and an fp32 head,
so the residual stream is fp32 while autocast runs the linears and the attention core in bf16. The same counting
as validation/measure_finetune_activations.py (unique storages autograd still holds when the forward ends, the
logits and the loss's fp32 copy, checkpoint-held inputs, one layer's recompute), on its tiny models, under
torch.autocast("cpu", dtype=torch.bfloat16), with torch 2.13.0, transformers, peft 0.21.2, bitsandbytes 0.50.2.
CPU autocast casts the same ops this path reaches as CUDA's does (linear, matmul, scaled_dot_product_attention
to the lower precision; softmax, log_softmax and the norms' reductions not): torch==2.13.0:
aten/src/ATen/autocast_mode.cpp. Compared by tests/test_kbit_autocast.py (no torch needed).
    python validation/measure_kbit_autocast.py [--print]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import warnings
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_activations as ma  # noqa: E402
import measure_finetune_activations as mfa  # noqa: E402
from measure_new_families import NEW_FAMILIES  # noqa: E402

OUT = Path(__file__).resolve().parent / "kbit_autocast.json"
FAMILIES = ("llama", "qwen3")
ATTENTIONS = ("sdpa", "eager")
LORAS = ({"r": 8, "target_modules": "all-linear", "lora_dropout": 0.0},
         {"r": 16, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.05})


def prepared(family: str, attention: str, lora: dict, checkpointing):
    """The tiny bf16 model saved, loaded in NF4, prepared and adapted, as a QLoRA notebook does it."""
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    model, arch = ma.build.__wrapped__(family, "bf16", attention, ma.Checkpointing.none)
    model = mfa.quantized(model, torch.bfloat16)
    full = checkpointing is ma.Checkpointing.full
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=full,
                                            gradient_checkpointing_kwargs={"use_reentrant": False})
    return get_peft_model(model, LoraConfig(**lora)), arch


def measure(family: str, attention: str, lora: dict, checkpointing) -> dict:
    model, arch = prepared(family, attention, lora, checkpointing)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        m, per_layer, _ = mfa.measure(model, arch, checkpointing)
        reference = m
        if checkpointing is ma.Checkpointing.full:  # one layer's recompute: the same run without checkpointing
            plain, _ = prepared(family, attention, lora, ma.Checkpointing.none)
            plain.enable_input_require_grads()  # as gradient_checkpointing_enable does
            reference = mfa.measure(plain, arch, ma.Checkpointing.none)[0]
    return {"family": family, "attention": attention, "checkpointing": checkpointing.value, "lora": lora,
            "seq_len": mfa.SEQ, "micro_batch": mfa.BATCH, "measured": m.total(checkpointing, reference),
            "saved": m.saved, "held": m.held, "logits": m.logits, "copy": m.copy,
            "recompute_layer": reference.recompute_layer, "layers": per_layer}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--print", action="store_true", help="print the rows; do not write the file")
    args = parser.parse_args(argv)
    ma.FAMILIES.update(NEW_FAMILIES)
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    rows = []
    for family, attention, lora, ckpt in itertools.product(FAMILIES, ATTENTIONS, LORAS,
                                                           (ma.Checkpointing.none, ma.Checkpointing.full)):
        rows.append(measure(family, attention, lora, ckpt))
        print({k: v for k, v in rows[-1].items() if k != "layers"}, file=sys.stderr)
    if args.print:
        return
    config = {f: dict(ma.FAMILIES[f][1]) for f in FAMILIES}
    OUT.write_text(json.dumps({"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                            "peft": mfa._version("peft"), "bitsandbytes": mfa._version("bitsandbytes")},
                               "autocast": "torch.autocast('cpu', dtype=torch.bfloat16)", "config": config,
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
