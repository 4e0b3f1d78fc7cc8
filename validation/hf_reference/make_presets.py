"""Write configs/models/<name>.yaml for each preset in presets/sources.json, from its vendored config.json and the
count transformers gave it (presets/counts.json, written by count_presets.py). Needs zeroplan and pyyaml, not torch.

A preset keeps the config.json keys its family reads (the family config class's fields), with the values the file
states; its reference_params is transformers' exact count; its aliases are the Hub ids of sources.json's "aliases"
whose config.json gives the same counts (an alias of a preset written by hand is added to it by hand). Run from the
repository root:

    python validation/hf_reference/make_presets.py

tests/test_presets_hf.py checks that each written preset still equals what this script would write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from zeroplan.models.families import FAMILIES  # noqa: E402

HERE = ROOT / "validation" / "hf_reference"
MODELS = ROOT / "configs" / "models"


def load(relative: str) -> dict:
    return json.loads((HERE / relative).read_text(encoding="utf-8"))


def family_keys(raw: dict) -> dict:
    """The keys of a config.json that its family config class declares (by field name or alias), in file order."""
    cls = FAMILIES[raw["model_type"]]
    names = {name for name, field in cls.model_fields.items()} | {
        field.alias for field in cls.model_fields.values() if field.alias}
    return {key: value for key, value in raw.items() if key in names}


def note(entry: dict, counts: dict) -> str:
    return (f"The exact count transformers builds from {entry['hf_id']}'s config.json on the meta device: "
            f"{counts['num_params']:,} (validation/hf_reference/presets/counts.json, count_presets.py); config from "
            f"{entry['source']} ({entry['kind']}).")


def aliases_of(name: str, sources: dict) -> dict[str, str]:
    return {hub_id: f"config.json from {alias['source']}, counted in validation/hf_reference/presets/counts.json"
            for hub_id, alias in sorted(sources["aliases"].items()) if alias["preset"] == name}


def preset(name: str, entry: dict, sources: dict, counts: dict) -> dict:
    raw = load(entry["file"])
    measured = counts["configs"][entry["file"]]
    data = {"name": name, "source": f"https://huggingface.co/{entry['hf_id']}/blob/main/config.json",
            "hf_id": entry["hf_id"], "reference_params": measured["num_params"]}
    if measured["num_active_params"] != measured["num_params"]:
        data["reference_active_params"] = measured["num_active_params"]
    data["note"] = note(entry, measured)
    if aliases := aliases_of(name, sources):
        data["aliases"] = aliases
    data["config"] = family_keys(raw)
    return data


def expected() -> dict[str, str]:
    """preset name -> the YAML text this script writes for it."""
    sources, counts = load("presets/sources.json"), load("presets/counts.json")
    return {name: yaml.safe_dump(preset(name, entry, sources, counts), sort_keys=False, width=120)
            for name, entry in sources["presets"].items()}


def main() -> None:
    for name, text in expected().items():
        (MODELS / f"{name}.yaml").write_text(text, encoding="utf-8")
        print(f"wrote {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
