"""Check zeroplan's parameter counts against the models transformers builds, for every model preset.

Each preset's config is built with transformers on the meta device (no memory, no weights, no
network), as AutoModelForCausalLM (decoders) or T5ForConditionalGeneration (T5). Parameters are
counted once each by identity (tied weights once); the largest layer is DeepSpeed's
`model_to_params` (max over modules of their own direct parameters). Needs torch and transformers,
which zeroplan itself never imports.

Run from the repository root:  python validation/count_params.py [preset ...]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, T5ForConditionalGeneration  # noqa: E402

from zeroplan.models.families import ModelSpec  # noqa: E402
from zeroplan.models.params import count_params  # noqa: E402
from zeroplan.models.presets import load_model
from zeroplan.registry import preset_names  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "hf_reference"))
from count import TEXT_TOWER_TYPES, text_tower_on_meta  # noqa: E402

transformers.logging.set_verbosity_error()  # token-id range warnings for the tiny default configs


# Published model_types transformers does not know, and the model_type whose code they ship (Kimi K2's auto_map).
BUILD_AS = {"kimi_k2": "deepseek_v3"}


class TorchCount(NamedTuple):
    num_params: int
    largest_layer_params: int
    num_embedding_params: int
    num_active_params: int


def build_on_meta(spec: ModelSpec, **other_hf_keys) -> torch.nn.Module:
    """The transformers model for a preset's config, with parameters on the meta device.

    other_hf_keys: config keys zeroplan does not model but transformers needs (a pad_token_id).
    """
    hf_keys = spec.config.model_dump(by_alias=True, exclude_unset=True) | other_hf_keys
    model_type = BUILD_AS.get(hf_keys["model_type"], hf_keys["model_type"])
    del hf_keys["model_type"]
    config = AutoConfig.for_model(model_type, **hf_keys)
    if model_type in TEXT_TOWER_TYPES:  # its language model and LM head, out of the whole model
        return text_tower_on_meta(config)
    if "text_config" in hf_keys:  # a multimodal config: its language model, as zeroplan counts it
        config = config.get_text_config()
    with torch.device("meta"):
        if model_type == "t5":
            return T5ForConditionalGeneration(config)
        return AutoModelForCausalLM.from_config(config)


def _unique_numel(params) -> int:
    return sum({id(p): p.numel() for p in params}.values())


def _embedding_params(model: torch.nn.Module) -> int:
    """Token and learned-position tables and the LM head (tied once); not T5's relative-position biases."""
    modules = [model.get_input_embeddings(), model.get_output_embeddings()]
    modules += [
        m
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Embedding) and not name.endswith("relative_attention_bias")
    ]
    return _unique_numel(p for m in modules for p in m.parameters())


def _skipped_expert_params(model: torch.nn.Module) -> int:
    """Weights of the experts a token is not routed to: (E - k) / E of every experts module.

    Routed experts are the modules whose class name ends in "Experts" (transformers 5.x fuses a layer's experts
    into one, every tensor with a leading num_experts dimension); k is the config's num_experts_per_tok.
    """
    skipped = 0
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            params = list(module.parameters(recurse=False))
            experts = params[0].shape[0]
            skipped += _unique_numel(params) // experts * (experts - model.config.num_experts_per_tok)
    return skipped


def count_with_torch(model: torch.nn.Module) -> TorchCount:
    """Totals as DeepSpeed's `model_to_params` sees them, counting by identity (meta tensors share data_ptr 0)."""
    total = _unique_numel(model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return TorchCount(total, largest, _embedding_params(model), total - _skipped_expert_params(model))


def compare(name: str) -> tuple[TorchCount, TorchCount]:
    """(zeroplan's counts, transformers' counts) for one preset."""
    spec = load_model(name)
    ours = count_params(spec)
    mine = TorchCount(ours.num_params, ours.largest_layer_params, ours.num_embedding_params, ours.num_active_params)
    return mine, count_with_torch(build_on_meta(spec))


def main(names: list[str]) -> int:
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    header = ("preset", "zeroplan", "transformers", "reference", "largest layer", "embeddings", "active")
    print("{:<16} {:>17} {:>17} {:>17} {:>15} {:>15} {:>17}".format(*header))
    mismatches = 0
    for name in names or preset_names("models"):
        mine, theirs = compare(name)
        reference = load_model(name).reference_params
        ok = mine == theirs
        mismatches += not ok
        print(
            f"{name:<16} {mine.num_params:>17,} {theirs.num_params:>17,} {reference or 0:>17,} "
            f"{theirs.largest_layer_params:>15,} {theirs.num_embedding_params:>15,} "
            f"{theirs.num_active_params:>17,}  {'ok' if ok else f'MISMATCH {mine}'}"
        )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
