"""A fixed-seed fuzz campaign over every parser (tests/fuzzkit.py); longer runs: benchmarks/fuzz.py."""

from __future__ import annotations

import pytest
from fuzzkit import (
    ALIAS_BOMB,
    CLI_NUMBERS,
    HOSTILE_TEXTS,
    _yaml_text_case,
    campaign,
    outcome,
)

from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.models.presets import load_model
from zeroplan.readers import parse_yaml
from zeroplan.units import parse_count

SEED = 20261129


def test_fixed_seed_campaign_of_over_ten_thousand_inputs():
    tally = campaign(SEED, rounds=1700)
    assert sum(tally.values()) >= 10_000
    parsers = {name for name, _ in tally}
    assert parsers == {"model-yaml", "hf-config", "ds-json", "ds-text", "yaml-text", "cli-number", "plan-yaml"}
    for name in parsers:  # each parser saw both outcomes: the mutations reach past the first check
        assert tally[name, "error"] > 0, name
    assert tally["model-yaml", "ok"] > 0 and tally["ds-json", "ok"] > 0


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_hostile_texts(text):
    outcome(lambda: _yaml_text_case(text))


def test_yaml_python_tags_are_refused():
    with pytest.raises(ZeroplanError, match="invalid YAML"):
        parse_yaml("a: !!python/object/apply:os.system ['true']", "x.yaml")


@pytest.mark.parametrize("text", [ALIAS_BOMB, "a: &a [*a]"], ids=["9^9-bomb", "self-reference"])
def test_alias_bombs_are_refused(text):
    with pytest.raises(ZeroplanError, match="aliases"):
        parse_yaml(text, "x.yaml")


@pytest.mark.parametrize("text", CLI_NUMBERS)
def test_cli_numbers(text):
    outcome(lambda: parse_count(text, "--params"))


def test_huge_counts_stay_exact_integers():
    assert parse_count("1e15") == 10**15
    assert parse_count("123456789012345678") == 123456789012345678


# Regressions the long campaign (benchmarks/fuzz.py) found, each once a crash.
@pytest.mark.parametrize(
    "fn",
    [
        lambda: load_model("x" * 5000),  # OSError: file name too long
        lambda: load_model("model\x00.yaml"),  # ValueError: embedded null byte
        lambda: load_hardware("h" * 5000),
        lambda: parse_ds_config({"zero_optimization": {"offload_param": {"device": "auto"}}}, origin="ds.json"),
        lambda: parse_ds_config({"zero_optimization": {"offload_param": {"device": [1, 2]}}}, origin="ds.json"),
    ],
    ids=["long-name", "nul-byte", "long-hardware-name", "auto-offload-device", "list-offload-device"],
)
def test_found_by_fuzzing(fn):
    outcome(fn)
