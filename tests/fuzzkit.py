"""The fuzz engine shared by tests/test_fuzz.py (fixed seed, 10,000+ inputs) and benchmarks/fuzz.py (long runs).

Every case feeds one parser a mutated or hostile input; the contract is a clean result or one
ZeroplanError whose message is a single line. Anything else escaping is a crash.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from zeroplan.check.planfiles import plan_from_data, resolve_plan
from zeroplan.check.runner import check_run
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.errors import ZeroplanError
from zeroplan.jsonsource import scan_json_text
from zeroplan.models.params import count_params
from zeroplan.models.presets import model_from_data
from zeroplan.readers import parse_json, parse_yaml
from zeroplan.registry import bundled_config_dir, preset_paths
from zeroplan.units import parse_count

HOSTILE_VALUES = [
    None, True, False, 0, -1, -(10**30), 10**30, 2**63, 1.5, -0.0, float("nan"), float("inf"), float("-inf"),
    "", "x" * 10_000, "5e8", "auto", "9e9", [], {}, [1, 2], {"a": {"b": {"c": 1}}}, "\u0000", "\u00e9", "../../etc/passwd",
]
ALIAS_BOMB = "a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(  # 9^9 values once expanded, from 72 aliases
    f"a{i}: &a{i} [{','.join([f'*a{i - 1}' if i else '*a'] * 9)}]\n" for i in range(8)
)
HOSTILE_TEXTS = [
    "", " ", "\n", "null", "[]", "42", '"str"', "{", "}", "[" * 5000 + "]" * 5000, "a: &a [*a]",
    "a: !!python/object/apply:os.system ['true']", "!!binary AAAA", "a: 1\na: 2", ALIAS_BOMB,
    '{"a": 1, "a": 2}', "{'single': 1}", "key: [unclosed", "\t- tab", "--- \n--- \n", "%YAML 1.1\n---\na: 1",
    "/* open comment", "// only a comment", "\ufeff{}", "{\"a\": NaN}", "{\"a\": Infinity}", "{\"a\": 1e999}",
]
CLI_NUMBERS = ["0", "-1", "1.5", "nan", "inf", "-inf", "1e400", "1e19", "", " ", "0x10", "1e-3", "9" * 5000,
               "1_0", "\u0661\u0662", "\x00", "True", "1e15", "1,000"]
DS_SEEDS = [
    {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
     "zero_optimization": {"stage": 3, "overlap_comm": True, "reduce_bucket_size": 5e8,
                           "stage3_prefetch_bucket_size": "auto", "offload_optimizer": {"device": "cpu"}}},
    {"train_batch_size": "auto", "fp16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "cpu_offload": True}},
]  # fmt: skip


def mutate(rng: random.Random, value):
    """A structural mutation of a JSON-like value: replace, drop, recurse into or add a key; perturb a number."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        out = dict(value)
        key = rng.choice(list(out))
        roll = rng.random()
        if roll < 0.4:
            out[key] = rng.choice(HOSTILE_VALUES)
        elif roll < 0.6:
            out.pop(key)
        elif roll < 0.8:
            out[key] = mutate(rng, out[key])
        else:
            out[rng.choice(["bogus", str(key) + "_", str(key).upper(), "", "0"])] = rng.choice(HOSTILE_VALUES)
        return out
    if isinstance(value, (int, float)) and not isinstance(value, bool) and rng.random() < 0.8:
        return rng.choice([value * 10 ** rng.randint(1, 20), -value, value + 0.5, 0, str(value), float("nan")])
    return rng.choice(HOSTILE_VALUES)


def mutate_text(rng: random.Random, text: str) -> str:
    """Cut, splice a hostile text into, or NUL-poison a real file's text."""
    if not text or rng.random() < 0.5:
        return rng.choice(HOSTILE_TEXTS)
    i, j = sorted(rng.randrange(len(text) + 1) for _ in range(2))
    return rng.choice([text[:i] + text[j:], text[:i] + rng.choice(HOSTILE_TEXTS) + text[i:], text[:i] + "\x00" + text[i:]])


def _model_case(data) -> None:
    count_params(model_from_data(data, "fuzz.yaml"))


def _hf_case(data) -> None:
    count_params(model_from_data(data, "config.json", hf_name="fuzz"))


def _ds_case(data) -> None:
    parse_ds_config(data, origin="ds.json", hidden_size=4096, dp_world=8)


def _ds_text_case(text: str) -> None:
    _ds_case(parse_json(scan_json_text(text).text, "ds.json"))


PLANS_DIR = bundled_config_dir() / "plans"


def _plan_case(data) -> None:
    run = resolve_plan(plan_from_data(data, "fuzz-plan.yaml"), "fuzz-plan.yaml", PLANS_DIR)
    check_run(run)


def _yaml_text_case(text: str) -> None:
    _model_case(parse_yaml(text, "fuzz.yaml"))


def outcome(fn: Callable[[], object]) -> str:
    """'ok' or 'error'; any exception that is not a one-line ZeroplanError propagates (a crash)."""
    try:
        fn()
    except ZeroplanError as exc:
        message = str(exc).strip()
        if not message or "\n" in message:
            raise AssertionError(f"error message is not one line: {message!r}") from exc
        return "error"
    return "ok"


def campaign(seed: int, rounds: int) -> Counter:
    """rounds x 6 inputs over every parser; returns outcome counts per parser."""
    rng = random.Random(seed)
    models = [parse_yaml(p.read_text(encoding="utf-8"), str(p)) for p in preset_paths("models").values()]
    hf_configs = [m["config"] for m in models]
    plans = [parse_yaml(p.read_text(encoding="utf-8"), str(p)) for p in sorted(Path(PLANS_DIR).glob("*.yaml"))]
    tally: Counter = Counter()
    for i in range(rounds):
        cases = {
            "model-yaml": lambda: _model_case(mutate(rng, rng.choice(models))),
            "hf-config": lambda: _hf_case(mutate(rng, rng.choice(hf_configs))),
            "ds-json": lambda: _ds_case(mutate(rng, rng.choice(DS_SEEDS))),
            "ds-text": lambda: _ds_text_case(mutate_text(rng, json.dumps(rng.choice(DS_SEEDS)))),
            "yaml-text": lambda: _yaml_text_case(mutate_text(rng, json.dumps(rng.choice(models)))),
            "cli-number": lambda: parse_count(rng.choice(CLI_NUMBERS), "--params"),
        }
        if i % 10 == 0:  # plans evaluate the whole calculator: fewer of them
            cases["plan-yaml"] = lambda: _plan_case(mutate(rng, rng.choice(plans)))
        for name, fn in cases.items():
            tally[name, outcome(fn)] += 1
    return tally
