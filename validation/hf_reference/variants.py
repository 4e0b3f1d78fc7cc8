"""Reference counts for the small per-family test configs in variants/: count.py's measurement, run on them.

Each variants/<name>.json is a tiny config (widths of tens, a few layers) that sets the keys a family's count
depends on away from their defaults (biases on, head_dim wider than hidden / heads, sliding or NoPE layers, a
flipped tie flag, a key left out so the config-class default applies). transformers builds each on the meta
device exactly as count.py builds the published configs.

    python validation/hf_reference/variants.py    # writes validation/hf_reference/variants.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import count  # noqa: E402  (count.py beside this file: its environment and its measurement)

count.CONFIG_DIR = HERE / "variants"
OUTPUT = HERE / "variants.json"


def main() -> None:
    count.torch.set_num_threads(1)
    names = sorted(p.stem for p in count.CONFIG_DIR.glob("*.json"))
    report = {
        "transformers_version": count.transformers.__version__,
        "torch_version": count.torch.__version__,
        "built_with": "validation/hf_reference/count.py's count(), on variants/*.json",
        "models": {name: count.count(name) for name in names},
    }
    OUTPUT.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUTPUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
