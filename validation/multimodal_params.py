"""What a multimodal Llama 4 checkpoint holds beside the text model zeroplan counts: the vision encoder and the
projector, as transformers builds Llama4ForConditionalGeneration on the meta device from the published config
(validation/hf_reference/configs/Llama-4-*.json). The llama-4-scout and llama-4-maverick presets' notes quote it.

Run from the repository root (needs torch and transformers):  python validation/multimodal_params.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, Llama4ForConditionalGeneration

CONFIGS = Path(__file__).resolve().parent / "hf_reference" / "configs"
MODELS = ("Llama-4-Scout-17B-16E", "Llama-4-Maverick-17B-128E")

transformers.logging.set_verbosity_error()


def parts(model: str) -> dict[str, int]:
    """Parameters of the whole model, its vision_model, multi_modal_projector and the rest (the text model)."""
    raw = json.loads((CONFIGS / f"{model}.json").read_text(encoding="utf-8"))
    config = AutoConfig.for_model("llama4", **{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        built = Llama4ForConditionalGeneration(config)
    total = sum(p.numel() for p in built.parameters())
    vision = sum(p.numel() for p in built.vision_model.parameters())
    projector = sum(p.numel() for p in built.multi_modal_projector.parameters())
    return {"total": total, "vision": vision, "projector": projector, "text": total - vision - projector}


def main() -> int:
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for model in MODELS:
        print(model, " ".join(f"{k} {v:,}" for k, v in parts(model).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
