"""Reference counts for the presets of issue 25 (the models people fine-tune in 2025-26) and for the Hub ids counted
as a preset because their config.json holds the same shapes, measured as count.py measures configs/: transformers
building the causal LM from each vendored config.json on the meta device.

presets/sources.json names every config (its file under validation/hf_reference/, the public copy it was taken from,
the Hub id it is the config.json of). tests/test_presets_hf.py holds each preset in configs/models/ to these counts,
and each alias's config to its preset's. Run from the repository root with torch and transformers 5.x:

    python validation/hf_reference/count_presets.py

Writes validation/hf_reference/presets/counts.json (keys sorted, reruns identical).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
for noisy in ("torchao", "torch.utils._pytree"):  # import-time notes about the installation
    logging.getLogger(noisy).setLevel(logging.ERROR)

import transformers  # noqa: E402

import validation.hf_reference.count as count  # noqa: E402

HERE = Path(__file__).resolve().parent
PRESETS = HERE / "presets"
KEYS = ("num_params", "largest_layer_params", "num_embedding_params", "num_active_params")


def measure(file: str) -> dict:
    """count.py's count of one config file (a path under validation/hf_reference/)."""
    path = HERE / file
    count.CONFIG_DIR = path.parent
    measured = count.count(path.stem)
    return {key: measured[key] for key in KEYS}


def main() -> None:
    sources = json.loads((PRESETS / "sources.json").read_text(encoding="utf-8"))
    files = sorted({entry["file"] for group in ("presets", "aliases") for entry in sources[group].values()})
    measured = {}
    for file in files:
        print(f"counting {file} ...", file=sys.stderr, flush=True)
        measured[file] = measure(file)
    out = {"built_with": "validation/hf_reference/count_presets.py (count.py's count on the meta device)",
           "transformers_version": transformers.__version__, "configs": measured}
    (PRESETS / "counts.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {PRESETS / 'counts.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
