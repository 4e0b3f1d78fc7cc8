"""Issue 25's families from their transformers config classes' own defaults: zeroplan counts each as transformers
builds it, and estimates it without torch.

    python validation/check_family_defaults.py          # a table on stdout; exit 1 if any family fails

For each model_type, the config is `AutoConfig.for_model(model_type).to_dict()` (the class defaults of
transformers==5.25.0, nothing from zeroplan's fixtures), with the keys transformers' own configs write and a
config.json would carry. Checked:
  count     zeroplan's core count (models/families, no torch) == transformers' model built on the meta device
            (zeroplan.models.hf.build.describe: num_params, largest layer, embedding parameters)
  estimate  `zeroplan estimate --model config.json --seq-len 512` with the [hf] extra hidden (has_extra False):
            exit 0, no refusal (the core alone estimates it)
Needs torch and transformers; tests/test_family_defaults.py runs the same checks (marked torch).
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ITEM5 = ("gemma4", "gemma4_text", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "deepseek_v32",
         "deepseek_v4", "qwen3_vl", "qwen3_vl_moe", "mistral3", "ministral3", "olmoe", "cohere", "starcoder2", "phi",
         "ernie4_5", "ernie4_5_moe", "exaone4", "seed_oss")
SEQ_LEN = "512"
IMAGE_TEXT = frozenset({"qwen3_vl", "qwen3_vl_moe"})  # transformers 5.25: no *ForCausalLM for their language model
# zeroplan counts a vision-language config's language model as AutoModelForCausalLM builds it from the text_config
# (docs/models.md); transformers 5.25 builds no causal LM from the outer Mistral3Config itself.
TEXT_MODEL = frozenset({"mistral3"})
VISION_PREFIXES = ("model.visual.", "model.vision_tower.", "model.multi_modal_projector.")


def default_config(model_type: str) -> dict:
    import transformers

    data = transformers.AutoConfig.for_model(model_type).to_dict()
    return json.loads(json.dumps(data, default=str))  # as a config.json carries it


def count_check(data: dict) -> tuple[bool, str]:
    from zeroplan.models.families import parse_family_config
    from zeroplan.models.hf.build import describe
    from zeroplan.models.params import count_params

    ours = replace(count_params(parse_family_config(dict(data), strict=False)), notes=())
    if data["model_type"] in IMAGE_TEXT:  # no *ForCausalLM: the whole model built, its vision tower left out
        theirs = language_model_params(data)
        return ours.num_params == theirs, f"{ours.num_params:,} vs transformers {theirs:,} (vision tower apart)"
    built = data["text_config"] if data["model_type"] in TEXT_MODEL else data
    theirs = replace(describe(dict(built), "defaults").counts, notes=())
    fields = ("num_params", "largest_layer_params", "num_embedding_params")
    same = all(getattr(ours, f) == getattr(theirs, f) for f in fields)
    return same, f"{ours.num_params:,} vs transformers {theirs.num_params:,}"


def language_model_params(data: dict) -> int:
    """AutoModelForImageTextToText on the meta device: its parameters outside the vision tower and projector."""
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    seen, total = set(), 0
    for name, p in model.named_parameters():
        if not name.startswith(VISION_PREFIXES) and id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def estimate_check(data: dict) -> tuple[bool, str]:
    from typer.testing import CliRunner

    from zeroplan.cli.app import app
    from zeroplan.models import hf

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(data))
        has_extra, hf.has_extra = hf.has_extra, lambda: False
        try:
            result = CliRunner().invoke(app, ["estimate", "--model", str(path), "--seq-len", SEQ_LEN])
        finally:
            hf.has_extra = has_extra
    lines = result.output.strip().splitlines()
    return result.exit_code == 0, "ok" if result.exit_code == 0 else (lines[-1] if lines else repr(result.exception))


def check(model_type: str) -> dict:
    data = default_config(model_type)
    counted, count_text = count_check(data)
    estimated, estimate_text = estimate_check(data)
    return dict(model_type=model_type, count=counted, count_text=count_text, estimate=estimated,
                estimate_text=estimate_text)


def main() -> int:
    import transformers

    transformers.logging.set_verbosity_error()
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type in ITEM5:
            rows.append(check(model_type))
    print("| model_type | count == transformers | estimate without torch |\n|---|---|---|")
    for r in rows:
        print(f"| {r['model_type']} | {'yes' if r['count'] else 'NO'} ({r['count_text']}) | "
              f"{'yes' if r['estimate'] else 'NO: ' + r['estimate_text']} |")
    return 0 if all(r["count"] and r["estimate"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
