"""A fixed-seed fuzz campaign over every parser: each input parses cleanly or raises one ZeroplanError.

Inputs are mutations of real files (presets, DeepSpeed configs) plus hostile shapes: wrong types, huge,
negative and non-finite numbers, deep nesting, long strings, YAML tags, anchors and aliases, duplicate
keys, empty text. A longer campaign: `python benchmarks/fuzz.py --inputs 200000`.
"""

from __future__ import annotations

import json
import random

import pytest

from zeroplan.cli import parse_count
from zeroplan.dsconfig import parse_ds_config
from zeroplan.errors import ZeroplanError
from zeroplan.jsonsource import scan_json_text
from zeroplan.params import count_params
from zeroplan.presets import _registry, model_from_data, parse_json, parse_yaml
from zeroplan.spec import HardwareSpec

SEED = 20261129
HOSTILE_VALUES = [
    None, True, False, 0, -1, -(10**30), 10**30, 2**63, 1.5, -0.0, float("nan"), float("inf"), float("-inf"),
    "", "x" * 10_000, "5e8", "auto", [], {}, [1, 2], {"a": {"b": {"c": 1}}}, "\u0000", "\udcff"[:0] + "\u00e9",
]
HOSTILE_TEXTS = [
    "", " ", "\n", "null", "[]", "42", '"str"', "{", "}", "[" * 5000 + "]" * 5000, "a: &a [*a]",
    "a: !!python/object/apply:os.system ['true']", "!!binary AAAA", "a: 1\na: 2",
    "a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(f"a{i}: &a{i} [{','.join([f'*a{i - 1}' if i else '*a'] * 9)}]\n" for i in range(8)),
    '{"a": 1, "a": 2}', "{'single': 1}", "key: [unclosed", "\t- tab", "--- \n--- \n", "%YAML 1.1\n---\na: 1",
]


def _mutate(rng: random.Random, value):
    """A structural mutation of a JSON-like value."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        out = dict(value)
        key = rng.choice(list(out))
        roll = rng.random()
        if roll < 0.4:
            out[key] = rng.choice(HOSTILE_VALUES)
        elif roll < 0.6:
            out.pop(key)
        elif roll < 0.8:
            out[key] = _mutate(rng, out[key])
        else:
            out[rng.choice(["bogus", key + "_", key.upper(), "", "0"])] = rng.choice(HOSTILE_VALUES)
        return out
    if isinstance(value, (int, float)) and not isinstance(value, bool) and rng.random() < 0.8:
        return rng.choice([value * 10**rng.randint(1, 20), -value, value + 0.5, 0, str(value), float("nan")])
    return rng.choice(HOSTILE_VALUES)


def _text_mutation(rng: random.Random, text: str) -> str:
    if not text or rng.random() < 0.5:
        return rng.choice(HOSTILE_TEXTS)
    i, j = sorted(rng.randrange(len(text) + 1) for _ in range(2))
    return rng.choice([text[:i] + text[j:], text[:i] + rng.choice(HOSTILE_TEXTS) + text[i:], text[:i] + "\x00" + text[i:]])


def _model_seeds() -> list[dict]:
    return [parse_yaml(p.read_text(), str(p)) for p in _registry("models").values()]


DS_SEEDS = [
    {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
     "zero_optimization": {"stage": 3, "overlap_comm": True, "reduce_bucket_size": 5e8,
                           "stage3_prefetch_bucket_size": "auto", "offload_optimizer": {"device": "cpu"}}},
    {"train_batch_size": "auto", "fp16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "cpu_offload": True}},
]


def _expect_clean_or_zeroplan_error(fn) -> None:
    try:
        fn()
    except ZeroplanError as exc:
        assert str(exc) and "\n" not in str(exc).strip(), repr(exc)


def _model_case(data) -> None:
    spec = model_from_data(data, "fuzz.yaml")
    count_params(spec)
    spec.architecture()


def _hf_case(data) -> None:
    spec = model_from_data(data, "config.json", hf_name="fuzz")
    count_params(spec)


def _ds_case(data) -> None:
    parse_ds_config(data, origin="ds.json", hidden_size=4096, dp_world=8)


def test_fuzz_campaign_ten_thousand_inputs():
    rng = random.Random(SEED)
    models = _model_seeds()
    hf_configs = [m["config"] for m in models]
    tried = 0
    for _ in range(2500):
        _expect_clean_or_zeroplan_error(lambda: _model_case(_mutate(rng, rng.choice(models))))
        _expect_clean_or_zeroplan_error(lambda: _hf_case(_mutate(rng, rng.choice(hf_configs))))
        _expect_clean_or_zeroplan_error(lambda: _ds_case(_mutate(rng, rng.choice(DS_SEEDS))))
        text = _text_mutation(rng, json.dumps(rng.choice(DS_SEEDS)))
        _expect_clean_or_zeroplan_error(lambda: _ds_case(parse_json(scan_json_text(text).text, "ds.json")))
        tried += 4
    assert tried == 10_000


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_hostile_yaml_texts(text):
    _expect_clean_or_zeroplan_error(lambda: _model_case(parse_yaml(text, "fuzz.yaml")))


def test_yaml_python_tags_are_refused():
    with pytest.raises(ZeroplanError, match="invalid YAML"):
        parse_yaml("a: !!python/object/apply:os.system ['true']", "x.yaml")


def test_alias_bomb_is_refused_quickly():
    bomb = next(t for t in HOSTILE_TEXTS if t.startswith("a: &a"))  # 9^9 values when expanded
    with pytest.raises(ZeroplanError, match="aliases"):
        parse_yaml(bomb, "x.yaml")


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "nan", "inf", "-inf", "1e400", "1e19", "", " ", "0x10", "1e-3",
                                  "9" * 5000, "1_0", "١٢", "\x00", "True"])
def test_cli_numbers(text):
    _expect_clean_or_zeroplan_error(lambda: parse_count(text, "--params"))


def test_hardware_fields_reject_bad_types():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        HardwareSpec(name="x", source="s", memory_gib=float("nan"))
