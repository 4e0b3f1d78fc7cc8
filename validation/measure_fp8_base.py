"""Measure an FP8 block-scaled checkpoint's stored bytes as transformers builds it, against zeroplan's count.

Builds small Qwen3 and Llama configs on the meta device, swaps their linears for transformers' FP8Linear exactly as
a pre-quantized `quant_method: fp8` checkpoint loads (transformers.integrations.finegrained_fp8.replace_with_fp8_linear,
the output head kept), and sums the bytes of every FP8Linear's weight and weight_scale_inv. zeroplan's number is the
Tuning's packed_weight_bytes + quant_state_bytes for the same config.json under LoRA. Writes validation/fp8_base.json.
Needs torch and transformers (transformers==5.25.0 here): python validation/measure_fp8_base.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = {  # hidden sizes that are and are not multiples of the 128 block
    "qwen3-tiny": {"model_type": "qwen3", "hidden_size": 320, "intermediate_size": 1000, "num_hidden_layers": 2,
                   "num_attention_heads": 5, "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 1000,
                   "tie_word_embeddings": False},
    "llama-tiny": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 3,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": False},
}  # fmt: skip
BLOCK = [128, 128]


def _preset(name: str) -> dict:
    import yaml

    return yaml.safe_load((ROOT / "configs" / "models" / f"{name}.yaml").read_text(encoding="utf-8"))["config"]


CONFIGS["qwen3-8b"] = _preset("qwen3-8b")  # Qwen/Qwen3-8B-FP8's shapes (its config.json: weight_block_size [128, 128])


def measured(config: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import FP8Linear, replace_with_fp8_linear

    hf = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    replace_with_fp8_linear(model, modules_to_not_convert=["lm_head"],
                            quantization_config=FineGrainedFP8Config(weight_block_size=BLOCK), pre_quantized=True)
    total = 0
    for module in model.modules():
        if isinstance(module, FP8Linear):
            total += sum(t.numel() * t.element_size() for t in (module.weight, module.weight_scale_inv))
    return total


def counted(config: dict) -> int:
    from zeroplan.scenario import ScenarioArgs, scenario

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps({**config, "quantization_config": {"quant_method": "fp8", "weight_block_size": BLOCK}}))
        scn = scenario(ScenarioArgs(model=str(path), lora_rank="8", lora_targets="all-linear", gpus="1", engine="ddp"))
    return scn.tuning.packed_bytes + scn.tuning.quant_state_bytes


def main() -> None:
    rows = {name: {"transformers": measured(config), "zeroplan": counted(config)} for name, config in CONFIGS.items()}
    (ROOT / "validation" / "fp8_base.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
