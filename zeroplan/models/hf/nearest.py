"""The nearest described block of a model counted by transformers, for when its meta-device forward cannot run.

The count of such a model is exact (built on the meta device, zeroplan.models.hf.build); its activations are
measured by one meta forward (hf.probe). Where that forward cannot run (a value-dependent op; Gemma 4's
per-layer inputs are reshaped by the full depth, which the shallow copy cuts), the activations are estimated by
zeroplan's formulas (memory.activations) for the family whose blocks are nearest: the same config read by that
family's reader, or, for a model_type without one, the flat facts taken from the built model. Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import replace

from pydantic import ValidationError

from zeroplan.models.architecture import Architecture

# model_type -> the described family whose blocks it extends, and what the formula then leaves out.
# zeroplan describes Gemma 4 itself (models/families/gemma4.py): from the CLI a gemma4 config never reaches
# transformers; a caller of zeroplan.models.hf.describe on one gets Gemma 4's own block (its meta forward cannot run:
# the shallow copy cuts the depth its per-layer inputs are reshaped by, modeling_gemma4.py, transformers 5.25).
NEAREST_DESCRIBED: dict[str, tuple[str, str]] = {
    "gemma4": ("gemma4_text", "its own block, nothing left out"),
    "gemma4_text": ("gemma4_text", "its own block, nothing left out"),
}


def nearest_architecture(arch: Architecture) -> tuple[Architecture, str]:
    """The Architecture whose activation formulas stand in for a transformers-counted model's, and in words which."""
    from zeroplan.models.families import parse_family_config

    data = json.loads(arch.hf_config_json or "{}")
    model_type = data.get("model_type")
    if model_type in NEAREST_DESCRIBED:
        family, left_out = NEAREST_DESCRIBED[model_type]
        text = data["text_config"] if isinstance(data.get("text_config"), dict) else data
        try:
            near = parse_family_config({**text, "model_type": family}, strict=False).architecture()
        except (ValidationError, ValueError):
            pass
        else:
            return near, f"zeroplan's {family} block read from the same config ({left_out})"
    return (replace(arch, hf_config_json=None),
            "a generic decoder block of the built model's flat facts (softmax attention, its MLP, its norms)")
