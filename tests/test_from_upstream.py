"""zeroplan's reading of the tools' freeze and `all`-linear rules against what the tools' own code trains on the same
named parameters: validation/measure_tool_rules.py ran LLaMA-Factory's `_setup_freeze_tuning` and
`find_all_linear_modules` and axolotl's `freeze_layers_except` and `find_all_linear_names`, unchanged, on zeroplan's
named parameters of each preset and wrote validation/tool_rules.json (the source of every expected set here)."""

import hashlib
import json
import re
from pathlib import Path

import pytest

from zeroplan.errors import SpecError
from zeroplan.frameworks.tuning import TrainOnly, linear_names
from zeroplan.models.named import OUTPUT_HEAD, linears, named_parameters
from zeroplan.models.presets import load_model

DATA = json.loads((Path(__file__).resolve().parent.parent / "validation" / "tool_rules.json").read_text())


def _names(preset: str) -> list[str]:
    return [p.name for p in named_parameters(load_model(preset))]


def _digest(names: set[str]) -> dict:
    ordered = sorted(names)
    return {"count": len(ordered), "sha256": hashlib.sha256("\n".join(ordered).encode()).hexdigest()}


@pytest.mark.parametrize("row", DATA["freeze"], ids=lambda r: f"{r['preset']} {r['layers']} {r['modules']} {r['extra']}")
def test_llamafactory_freeze_trains_what_llamafactory_trains(row):
    rule = TrainOnly("freeze_trainable_modules", row["layers"], tuple(m.strip() for m in row["modules"].split(",")),
                     tuple(row["extra"].split(",")) if row["extra"] else ())
    trainable = rule.trainable(_names(row["preset"]), load_model(row["preset"]).architecture().num_layers)
    assert _digest(trainable) == {"count": row["count"], "sha256": row["sha256"]}


@pytest.mark.parametrize("row", DATA["unfrozen"], ids=lambda r: f"{r['preset']} {r['patterns']}")
def test_axolotl_unfrozen_parameters_train_what_axolotl_trains(row):
    """Where a pattern matches no parameter (Gemma 2's tied head, Phi-3's fused qkv_proj) axolotl trains nothing for
    it, silently; zeroplan says so in one error line instead, as it does for a --freeze glob."""
    names = _names(row["preset"])
    rule = TrainOnly("unfrozen_parameters", patterns=tuple(row["patterns"]))
    dead = [p for p in row["patterns"] if not _matches(p, names)]
    if dead:
        with pytest.raises(SpecError, match=f"unfrozen_parameters: {re.escape(dead[0])} matches no parameter"):
            rule.trainable(names, 0)
        return
    assert _digest(rule.trainable(names, 0)) == {"count": row["count"], "sha256": row["sha256"]}


def _matches(pattern: str, names: list[str]) -> bool:
    try:
        return bool(TrainOnly("unfrozen_parameters", patterns=(pattern,)).trainable(names, 0))
    except SpecError:
        return False


@pytest.mark.parametrize("preset", sorted(DATA["all_linear"]))
def test_all_linear_names_as_both_tools_find_them(preset):
    lins = [lin.name for lin in linears(named_parameters(load_model(preset)))]
    ours = sorted(linear_names(lins, OUTPUT_HEAD))
    assert ours == DATA["all_linear"][preset]["llamafactory"] == DATA["all_linear"][preset]["axolotl"]
