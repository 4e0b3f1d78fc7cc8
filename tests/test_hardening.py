"""Hardening: huge numbers stay exact integers, commands write nothing unasked, writes are atomic,
JSON always parses with integer bytes, and the DeepSpeed method matches DeepSpeed's formulas."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeroplan.cli import files
from zeroplan.cli.app import app
from zeroplan.deepspeed.estimator import zero2_model_states, zero3_model_states
from zeroplan.errors import ZeroplanError

PLANS = Path(__file__).resolve().parent.parent / "configs" / "plans"


def _ints(value) -> list:
    """Every number in a JSON tree whose key ends in _bytes or sits under gpu_bytes."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (k.endswith("bytes") or k == "total"):
                found.append(v)
            found += _ints(v)
    elif isinstance(value, list):
        for v in value:
            found += _ints(v)
    return found


def test_a_quadrillion_parameters_on_a_million_gpus_stay_exact(runner):
    res = runner.invoke(app, ["estimate", "--params", "1e15", "--gpus", "1000000", "--nodes", "125000", "-f", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert all(type(v) is int for v in _ints(data))
    zero0, zero3 = data["stages"][0], data["stages"][3]
    assert zero0["model_states_bytes"] == 16 * 10**15  # 2 + 2 + 12 bytes per parameter, exactly
    assert zero3["model_states_bytes"] == 16 * 10**9  # 10^15 / 10^6 per GPU, exactly


@given(params=st.integers(1, 10**15), gpus=st.sampled_from([1, 2, 8, 64, 1024]), stage=st.integers(0, 3),
       fmt=st.sampled_from(["json", "yaml"]))
@settings(max_examples=25, deadline=None)
def test_estimate_output_always_parses_with_integer_bytes(params, gpus, stage, fmt):
    import yaml
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["estimate", "--params", str(params), "--gpus", str(gpus), "--stage", str(stage),
                                   "-f", fmt])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout) if fmt == "json" else yaml.safe_load(res.stdout)
    numbers = _ints(data)
    assert numbers and all(type(v) is int for v in numbers)


COMMANDS = [
    ["estimate", "--params", "9e9"],
    ["estimate", "--model", "gemma2-9b", "-f", "json"],
    ["capacity", "--model", "gemma2-9b"],
    ["advise", "--params", "9e9"],
    ["throughput", "--params", "9e9"],
    ["check", str(PLANS / "article-gemma2-9b-8xh100.yaml")],
    ["check", str(PLANS / "*.yaml"), "-f", "junit"],
    ["models"],
    ["hardware", "-f", "yaml"],
    ["estimate", "--params", "-1"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_commands_write_nothing_unasked(args, runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    runner.invoke(app, args)
    assert sorted(os.listdir(tmp_path)) == before


def test_write_is_atomic_when_interrupted(tmp_path, monkeypatch):
    target = tmp_path / "ds.json"

    def fail(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "link", fail)
    with pytest.raises(KeyboardInterrupt):
        files.write_new_file(target, "{}", force=False)
    assert os.listdir(tmp_path) == []  # neither the target nor a temp file is left behind


def test_write_never_replaces_an_existing_file_without_force(tmp_path):
    target = tmp_path / "ds.json"
    target.write_text("mine")
    with pytest.raises(ZeroplanError, match="already exists"):
        files.write_new_file(target, "theirs", force=False)
    assert target.read_text() == "mine"
    files.write_new_file(target, "theirs", force=True)
    assert target.read_text() == "theirs\n" and os.listdir(tmp_path) == ["ds.json"]  # a newline ends every file


# DeepSpeed evaluates its estimators in float64; where that is exact (every product below 2^53) the result
# must equal the formula in exact integer arithmetic. These restate DeepSpeed v0.19.6's estimator formulas
# (runtime/zero/stage_1_and_2.py, stage3.py) as rationals. The largest product is ZeRO-2's offload CPU term, P x 4 x 1024 GPUs x 1.5, so P < 2^53 / 6144.
EXACT = 2**53 // 8192  # about 1.1e12 parameters


@given(st.integers(1, EXACT), st.integers(1, 64), st.integers(1, 16))
def test_zero2_matches_the_exact_formula(params, gpn, nodes):
    total = gpn * nodes
    assert zero2_model_states(params, gpn, nodes, cpu_offload=False) == (params * 4 * gpn * 3 // 2, 2 * params + 18 * params // total)
    assert zero2_model_states(params, gpn, nodes, cpu_offload=True) == (params * max(4 * total, 16) * 3 // 2, 2 * params)


@given(st.integers(1, EXACT), st.integers(0, 10**9), st.integers(1, 64), st.integers(1, 16), st.booleans())
def test_zero3_matches_the_exact_formula(params, largest, gpn, nodes, zero_init):
    total = gpn * nodes
    cpu, gpu, _ = zero3_model_states(params, largest, gpn, nodes, cpu_offload=False, cpu_offload_params=False,
                                     zero_init=zero_init)
    assert gpu == 4 * largest + 18 * params // total
    assert cpu == (largest * 4 * gpn * 3 // 2 if zero_init else params * 4 * gpn * 3 // 2)


@given(st.integers(1, EXACT), st.integers(0, 10**9), st.integers(1, 64), st.sampled_from([1, 2, 4, 8, 16]))
def test_zero3_offload_matches_the_exact_formula(params, largest, gpn, nodes):
    # DeepSpeed multiplies by gpus_factor = 1 / nodes, exact in float64 only for powers of two;
    # elsewhere zeroplan reproduces DeepSpeed's float result, not the rational one.
    cpu, gpu, _ = zero3_model_states(params, largest, gpn, nodes, cpu_offload=True, cpu_offload_params=True,
                                     zero_init=True)
    assert (cpu, gpu) == (params * 18 * 3 // (2 * nodes), 4 * largest)
