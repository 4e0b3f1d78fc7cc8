"""Writes configs/index.json: every bundled model preset through the full loader (YAML -> config -> counts).

Run from a source checkout: `python -m zeroplan.models.index_writer --write` (without --write: print it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from zeroplan.models.params import count_params
from zeroplan.models.preset_index import INDEX_FILE, file_digest
from zeroplan.models.presets import load_model_file
from zeroplan.registry import bundled_config_dir
from zeroplan.validate import as_json

REGENERATE = "python -m zeroplan.models.index_writer --write"


def build_index(config_dir: Path | None = None) -> dict[str, Any]:
    """Every preset in `config_dir` (default: the bundled one) through the full loader: YAML -> config -> counts."""
    config_dir = config_dir or bundled_config_dir()
    models = {}
    for path in sorted((config_dir / "models").glob("*.yaml")):
        spec = load_model_file(path)
        models[path.stem] = {
            "name": spec.name, "source": spec.source, "hf_id": spec.hf_id, "crc32": file_digest(path),
            "architecture": as_json(spec.architecture()), "counts": as_json(count_params(spec.config)),
        }
    return {"models": models}


def dumps(index: dict[str, Any]) -> str:
    """The index as committed: sorted keys, indented, so a changed preset is a readable diff."""
    return json.dumps(index, indent=2, sort_keys=True) + "\n"


def write_index(path: Path) -> None:
    """Write the index of the presets beside `path` (its directory holds models/ and hardware/)."""
    path.write_text(dumps(build_index(path.parent)), encoding="utf-8")


def checkout_index_path() -> Path:
    """configs/index.json of the source checkout this module runs from; SystemExit when installed."""
    root = Path(__file__).resolve().parents[2]
    if "site-packages" in root.parts or not (root / "pyproject.toml").is_file() or not (root / "configs").is_dir():
        raise SystemExit(f"zeroplan runs from {root}, not a source checkout with configs/: refusing to write the index")
    return root / "configs" / INDEX_FILE


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        path = checkout_index_path()
        write_index(path)
        print(f"wrote {path}")
        return 0
    if argv:
        print(f"usage: {REGENERATE}  (without --write: print the index)", file=sys.stderr)
        return 2
    sys.stdout.write(dumps(build_index()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
