"""Reference counts for the fresh public configs in fresh/configs/ (issue 25: model configs of 2025-26 that no earlier
fixture holds), measured as count.py measures configs/: transformers building the model on the meta device.

A config transformers cannot build (a model_type it does not know, one it builds no causal LM from) is recorded with
its error: zeroplan must refuse it in one line (tests/test_fresh_configs.py). Run from the repository root with torch
and transformers 5.x:

    python validation/hf_reference/count_fresh.py

Writes validation/hf_reference/fresh/counts.json (keys sorted, reruns identical).
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

FRESH = Path(__file__).resolve().parent / "fresh"
KEYS = ("num_params", "largest_layer_params", "num_embedding_params", "num_active_params")


def main() -> None:
    count.CONFIG_DIR = FRESH / "configs"
    models = {}
    for path in sorted(count.CONFIG_DIR.glob("*.json")):
        print(f"counting {path.stem} ...", file=sys.stderr, flush=True)
        try:
            measured = count.count(path.stem)
        except Exception as exc:  # noqa: BLE001 - what transformers says is the record
            models[path.stem] = {"transformers_error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            continue
        models[path.stem] = {key: measured[key] for key in KEYS}
    out = {"built_with": "validation/hf_reference/count_fresh.py (count.py's count on the meta device)",
           "transformers_version": transformers.__version__, "models": models}
    (FRESH / "counts.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {FRESH / 'counts.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
