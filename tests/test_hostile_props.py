"""Hostile input, by property (docs/hardening.md, "Classes"): hypothesis generates hostile values for every option of
every command (the list read from the typer app, not written here), for the fields of the files zeroplan reads and
for every argument of the Python API, and each answer is a result or one error line, exit 1 or 2, with no control
character in the output; nonsense is refused; counts past any real run are refused before the work they size."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zeroplan
from zeroplan.cli.app import app
from zeroplan.errors import ZeroplanError
from zeroplan.scenario import requires
from zeroplan.scenario.bounds import OPTION_BOUNDS
from zeroplan.validate import MAX_MODEL_COUNTS

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = typer.main.get_command(app).commands
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# ZP_HOSTILE_EXAMPLES=N runs a longer campaign (the probe before a release); the suite runs 15 per property.
PROPS = settings(max_examples=int(os.environ.get("ZP_HOSTILE_EXAMPLES", "15")), deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])
# The smallest run each command answers quickly: the hostile value is added to it.
BASE = {"estimate": ["--model", "gpt2"], "advise": ["--model", "gpt2"], "capacity": ["--model", "gpt2"],
        "throughput": ["--model", "gpt2"], "sweep": ["--model", "gpt2", "--gpu-counts", "8"],
        "check": ["--model", "gpt2"], "models": [], "hardware": [],
        "calibrate": [str(Path(__file__).parent / "data" / "calibrate" / "memory_stats.json"), "--model", "gpt2"]}  # fmt: skip
ESCAPES = ["\x1b[31m", "\x1b]0;pwned\x07", "\r", "\x9b2J", "\u202e", "\x00", "\u2028", "\x7f"]
HOSTILE_TEXT = st.one_of(
    st.sampled_from(["", " ", "-1", "0", "nan", "inf", "1e400", "9" * 400, "1e308", "2^64", "1048577", "10000001",
                     "../../etc/passwd", "/dev/zero", "auto", "none", "every:0", "every:-1", "1,2", "\u0661"]),
    st.builds(lambda a, e, b: a + e + b, st.sampled_from(["", "x", "o.html", "./m"]), st.sampled_from(ESCAPES),
              st.sampled_from(["", ".yaml", "red", ".json"])),
    st.text(max_size=12),
)  # fmt: skip


def options_of(command: str) -> list:
    return [p for p in COMMANDS[command].params if p.opts and p.opts[0].startswith("--")]


ALL_OPTIONS = [(name, p.opts[0], p.is_flag) for name in COMMANDS for p in options_of(name)]
VALUED = [(c, o) for c, o, flag in ALL_OPTIONS if not flag and o not in ("--html", "--emit-deepspeed",
                                                                          "--emit-accelerate", "--emit-torchtitan",
                                                                          "--output")]  # writers: test_hostile.py


def outcome_is_clean(res) -> None:
    """A result, or one error line: exit 0, 1 or 2, no traceback, no control character anywhere in the output."""
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code in (0, 1, 2), res.exit_code
    assert not CONTROL.search(res.stdout.replace("\n", "")), res.stdout[:300]
    assert not CONTROL.search(res.stderr.replace("\n", "")), res.stderr[:300]
    if res.exit_code:
        errors = [line for line in res.stderr.splitlines() if line.startswith(("error:", "Error:"))]
        assert len(errors) == 1, res.stderr
        if res.stderr.startswith("error:"):  # zeroplan's own: the line alone (click's usage errors add a usage hint)
            assert len(res.stderr.strip().splitlines()) == 1, res.stderr


# --- escape, traceback: any option, any hostile text -----------------------------------------------------------

def test_the_option_list_is_read_from_the_app():
    assert {c for c, _ in VALUED} >= {"estimate", "advise", "check", "capacity", "throughput", "sweep"}
    assert ("estimate", "--buffer-factor") in VALUED and ("advise", "--global-batch") in VALUED


@PROPS
@given(case=st.sampled_from(VALUED), value=HOSTILE_TEXT)
def test_any_option_given_any_hostile_text_is_a_result_or_one_clean_line(runner, tmp_path, monkeypatch, case, value):
    command, option = case
    monkeypatch.chdir(tmp_path)
    base = BASE[command] if option not in ("--model", "--params") else []
    outcome_is_clean(runner.invoke(app, [command, *base, option, value]))


@PROPS
@given(escape=st.sampled_from(ESCAPES), where=st.sampled_from(["html", "model", "hardware", "deepspeed", "from"]))
def test_a_string_from_outside_never_reaches_the_terminal_raw(runner, tmp_path, monkeypatch, escape, where):
    """A path typed, a file name, a value read from a file (a deepspeed: path in a training YAML): escaped, whatever
    the format that goes to a terminal (table, markdown, the wrote/warning lines)."""
    monkeypatch.chdir(tmp_path)
    name = f"x{escape}y"
    args = ["estimate", "--model", "gpt2", "--stage", "3"]
    if where == "html":
        args += ["--html", f"{name}.html"]
    elif where == "model":
        if "\x00" not in name:  # no file system holds that name: the path is refused as typed
            (tmp_path / f"{name}.yaml").write_text((ROOT / "configs/models/gpt2.yaml").read_text())
        args = ["estimate", "--model", f"./{name}.yaml", "--stage", "3"]
    elif where == "hardware":
        args += ["--hardware", f"./{name}.yaml"]
    elif where == "deepspeed":
        args += ["--deepspeed-config", f"./{name}.json"]
    else:
        (tmp_path / "train.yaml").write_text(json.dumps({"base_model": "gpt2", "deepspeed": f"./{name}.json"}))
        args = ["estimate", "--from", "train.yaml", "--model", "gpt2"]
    for fmt in ("table", "markdown"):
        outcome_is_clean(runner.invoke(app, [*args, "--format", fmt, "--force"] if where == "html" else
                                       [*args, "--format", fmt]))  # fmt: skip


# --- silent nonsense: every option that needs another ------------------------------------------------------------

SAMPLE = {"pp_schedule": "zbv", "vpp": "2", "pp_first_layers": "3", "pp_last_layers": "3", "cp_comm": "a2a",
          "quant_type": "fp4", "quant_storage": "bfloat16", "lora_targets": "q_proj", "lora_dropout": "0.1",
          "modules_to_save": "lm_head", "buffer_factor": "2", "from_kind": "axolotl", "max_micro_batch": "4",
          "stack": "torchtitan", "emit_torchtitan": "t.toml", "reduce_bucket_size": "1e6",
          "prefetch_bucket_size": "1e6", "max_live_parameters": "1e6", "param_persistence_threshold": "1e6",
          "sub_group_size": "1e6", "hpz_partition_size": "2", "qlora_stack": "trl", "bnb_version": "0.43.1",
          "teacher": "llama-3.1-70b"}  # fmt: skip
# What makes each rule's option meaningless beside the base run (the engine and stage rules need a context).
CONTEXT = {"--engine deepspeed": ["--engine", "fsdp"], "ZeRO-3 (not --stage 0, 1 or 2)": ["--stage", "1"]}
NEEDS_CASES = [(command, rule) for command in COMMANDS for rule in requires.NEEDS
               if rule.option in {p.name for p in options_of(command)} and not (
                   rule.what in CONTEXT and "--" + CONTEXT[rule.what][0].strip("-") not in
                   {p.opts[0] for p in options_of(command)})]  # fmt: skip


def test_every_option_is_classified_as_standalone_or_needing_another():
    """The option list is read from the app: a new option must say whether it means something alone."""
    classified = requires.STANDALONE | requires.REFUSED_ELSEWHERE | {rule.option for rule in requires.NEEDS}
    unclassified = sorted({p.name for c in COMMANDS for p in options_of(c)} - classified)
    assert not unclassified, unclassified
    assert len(NEEDS_CASES) > 40


@pytest.mark.parametrize("case", NEEDS_CASES, ids=[f"{c}-{r.option}" for c, r in NEEDS_CASES])
def test_an_option_without_what_it_needs_is_refused_naming_both(runner, tmp_path, monkeypatch, case):
    """Every (command, rule) pair, read from the app and NEEDS: refused before any work, so all of them run."""
    command, rule = case
    monkeypatch.chdir(tmp_path)
    param = next(p for p in options_of(command) if p.name == rule.option)
    value = [] if param.is_flag else [SAMPLE[rule.option]]
    res = runner.invoke(app, [command, *BASE[command], *CONTEXT.get(rule.what, []), param.opts[0], *value])
    outcome_is_clean(res)
    assert res.exit_code == 2, (command, rule.option, res.output)
    assert param.opts[0] in res.stderr


@pytest.mark.parametrize("key", ["rank_pattern", "layers_to_transform", "layers_pattern", "exclude_modules",
                                 "layer_replication", "trainable_token_indices", "target_parameters", "bias",
                                 "lora_bias", "target_modules"])  # fmt: skip
def test_a_peft_key_that_changes_what_peft_trains_is_refused_naming_it(runner, tmp_path, key):
    value = {"rank_pattern": {"q_proj": 1000}, "layers_to_transform": [0], "layers_pattern": "layers",
             "exclude_modules": ["v_proj"], "layer_replication": [[0, 4]], "trainable_token_indices": [1],
             "target_parameters": ["mlp.experts.gate_up_proj"], "bias": "all", "lora_bias": True,
             "target_modules": []}[key]  # fmt: skip
    config = tmp_path / "adapter_config.json"
    config.write_text(json.dumps({"r": 8, "target_modules": ["q_proj"], key: value}))
    res = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--adapter-config", str(config)])
    outcome_is_clean(res)
    assert res.exit_code == 1 and f": {key}: " in res.stderr


@PROPS
@given(key=st.sampled_from(["r", "target_modules", "lora_dropout", "use_dora", "modules_to_save", "rank_pattern",
                            "alpha_pattern", "bias", "peft_type", "unknown_key"]),
       value=st.one_of(st.none(), st.booleans(), st.integers(-2, 10**6), st.floats(allow_nan=True),
                       st.text(max_size=8), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                                  st.integers(), max_size=2)))
def test_any_adapter_config_value_is_a_result_or_one_line(runner, tmp_path, key, value):
    config = tmp_path / "adapter_config.json"
    config.write_text(json.dumps({"r": 8, "target_modules": ["q_proj", "v_proj"], key: value}))
    outcome_is_clean(runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--adapter-config", str(config),
                                         "--stage", "2"]))  # fmt: skip


# --- unbounded memory, hang: counts past any real run refused up front, with the bound --------------------------

@PROPS
@given(key=st.sampled_from(sorted(MAX_MODEL_COUNTS)), excess=st.integers(1, 10**15))
def test_a_model_count_past_any_real_model_is_refused_naming_the_bound(runner, tmp_path, key, excess):
    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000}
    bound = MAX_MODEL_COUNTS[key]
    config[key] = bound + excess
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    res = runner.invoke(app, ["estimate", "--model", str(tmp_path / "m" / "config.json")])
    outcome_is_clean(res)
    assert res.exit_code == 1 and f"{key}: {bound + excess:,} is past any real model (at most {bound:,})" in res.stderr


BOUNDED = [(c, o, p.name) for c in COMMANDS for p in options_of(c) for o in p.opts[:1] if p.name in OPTION_BOUNDS]


@PROPS
@given(case=st.sampled_from(BOUNDED), excess=st.integers(1, 10**17))
def test_a_count_past_any_real_run_is_refused_before_any_work(runner, case, excess):
    command, option, name = case
    value = OPTION_BOUNDS[name] + excess
    res = runner.invoke(app, [command, *BASE[command], option, str(value)])
    outcome_is_clean(res)
    assert res.exit_code == 1 and f"{option} {value:,} is past any real run (at most {OPTION_BOUNDS[name]:,})" in res.stderr


# --- traceback: the Python API, every argument ----------------------------------------------------------------

HOSTILE_VALUES = st.sampled_from([None, True, False, 0, -1, 10**30, 1.5, float("nan"), float("inf"), "", "\x1b[31m",
                                  "nope", [], [1], {}, {"a": 1}, object(), b"bytes", Path("/dev/zero")])  # fmt: skip
API = [(fn, name) for fn in (zeroplan.estimate, zeroplan.recommend) for name in inspect.signature(fn).parameters
       if name not in ("search_parallelism",)]  # a search is the slow path: test_api.py runs it


@PROPS
@given(case=st.sampled_from(API), value=HOSTILE_VALUES)
def test_every_api_argument_given_a_hostile_value_raises_one_line_or_answers(case, value):
    fn, name = case
    base = {"model": "gpt2"} if name not in ("model", "params") else {}
    try:
        fn(**base, **{name: value})
    except ZeroplanError as exc:
        assert str(exc).strip() and "\n" not in str(exc), str(exc)


# --- traceback: any locale or encoding --------------------------------------------------------------------------

@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=st.sampled_from([{"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"},
                            {"LANG": "C", "LC_ALL": "C", "PYTHONIOENCODING": ""}, {"LC_ALL": "POSIX"}]),
       args=st.sampled_from([["estimate", "--model", "llama-3.1-8b"], ["estimate", "--model", "gpt2", "-f", "markdown"],
                             ["throughput", "--model", "gpt2", "--sweep", "auto"], ["models"],
                             ["estimate", "--model", "gpt2", "--html", "\u2265\x1b.html", "--force"]]))  # fmt: skip (--force: hypothesis reuses tmp_path)
def test_no_traceback_under_any_encoding(tmp_path, env, args):
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    res = subprocess.run([sys.executable, "-m", "zeroplan", *args], capture_output=True, cwd=tmp_path, env=full,
                         timeout=120)  # fmt: skip
    assert res.returncode in (0, 1), res.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in res.stderr and b"\x1b" not in res.stdout + res.stderr
    if env.get("PYTHONIOENCODING") == "ascii":
        assert all(byte < 128 for byte in res.stdout + res.stderr)


# --- the JSON says what the run is -----------------------------------------------------------------------------

@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([1, 2, 4, 8]), gpus=st.sampled_from([8, 16]))
def test_the_data_parallel_degree_is_one_number_wherever_it_appears(runner, tp, gpus):
    res = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", str(gpus), "--tp", str(tp), "--stage",
                              "1", "-f", "json"])  # fmt: skip
    data = json.loads(res.stdout)
    dps = {data["parallelism"]["dp"]} | ({data["mesh"]["dp"]} if "mesh" in data else set())
    assert dps == {gpus // tp}
