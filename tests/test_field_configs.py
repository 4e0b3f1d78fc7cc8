"""Configs from the field (tests/data/field): every DeepSpeed JSON through `check` and `estimate`, as a user's CI runs them.

Each manifest entry records the expected verdict (`expect`): `pass`, the error and warning rule ids that fire
(exactly), or `refused: TEXT` for a config DeepSpeed 0.19.8 refuses. Nothing may crash: exit 0 or 1, no
traceback, JSON that parses, one stderr line for a refusal. The Accelerate, LLaMA-Factory and axolotl YAMLs
are for a later `--from`; for now the DeepSpeed configs they name must be in the corpus.
"""

import json
import posixpath
from pathlib import Path

import pytest
import yaml

from zeroplan.cli.app import app

FIELD = Path(__file__).parent / "data" / "field"
MANIFEST = yaml.safe_load((FIELD / "manifest.yaml").read_text(encoding="utf-8"))
DEEPSPEED = [entry for entry in MANIFEST if entry["kind"] == "deepspeed"]
LAUNCHERS = [entry for entry in MANIFEST if entry["kind"] != "deepspeed"]
RUN = ("--model", "llama-3.1-8b", "--gpus", "8")


def _id(entry: dict) -> str:
    return Path(entry["file"]).stem.split("__", 1)[1]


def _crash_free(result) -> None:
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr


def _refusal(expect) -> str | None:
    return expect.removeprefix("refused: ") if isinstance(expect, str) and expect.startswith("refused: ") else None


def test_every_deepspeed_config_has_a_verdict_and_every_file_an_entry():
    assert {entry["file"] for entry in MANIFEST} == {str(p.relative_to(FIELD)) for p in FIELD.glob("*/*") if p.is_file()}
    for entry in DEEPSPEED:
        expect = entry["expect"]
        assert expect == "pass" or _refusal(expect) or (isinstance(expect, list) and expect), entry["file"]


@pytest.mark.parametrize("entry", DEEPSPEED, ids=_id)
def test_check_gives_the_recorded_verdict(runner, entry):
    result = runner.invoke(app, ["check", "--deepspeed-config", str(FIELD / entry["file"]), *RUN, "-f", "json"])
    _crash_free(result)
    if refused := _refusal(entry["expect"]):
        assert result.exit_code == 1 and refused in result.stdout + result.stderr
        return
    report = json.loads(result.stdout)
    (plan,) = report["plans"]
    fired = sorted({f["rule"] for f in plan["findings"] if f["severity"] != "info"})
    assert fired == ([] if entry["expect"] == "pass" else sorted(entry["expect"]))
    errors = any(f["severity"] == "error" for f in plan["findings"])
    assert result.exit_code == int(errors) and result.stderr == ""


@pytest.mark.parametrize("entry", DEEPSPEED, ids=_id)
def test_estimate_reads_it_or_refuses_it_in_one_line(runner, entry):
    path = str(FIELD / entry["file"])
    result = runner.invoke(app, ["estimate", "--deepspeed-config", path, *RUN, "-f", "json"])
    _crash_free(result)
    lines = result.stderr.splitlines()
    if refused := _refusal(entry["expect"]):
        assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and refused in lines[0]
        error = json.loads(result.stdout)["error"]  # -f json: the failure as a JSON document on stdout too
        assert error["exit_code"] == 1 and len(error["messages"]) == 1 and refused in error["messages"][0]
        return
    assert result.exit_code == 0
    data = json.loads(result.stdout)  # warnings go to stderr: stdout stays the JSON
    stage = json.loads(Path(path).read_text(encoding="utf-8")).get("zero_optimization", {}).get("stage", 0)
    assert [s["stage"] for s in data["stages"]] == [stage]
    assert all(line.startswith(f"warning: {path}") for line in lines)
    keys = ("unknown-key", "unknown-top-key")
    expected_warnings = isinstance(entry["expect"], list) and any(rule in entry["expect"] for rule in keys)
    assert bool(lines) == expected_warnings


@pytest.mark.parametrize("entry", DEEPSPEED, ids=_id)
def test_a_bare_parameter_count_does_not_crash(runner, entry):
    path = str(FIELD / entry["file"])
    for command in ("check", "estimate"):
        result = runner.invoke(app, [command, "--deepspeed-config", path, "--params", "1e9", "--gpus", "8", "-f", "json"])
        _crash_free(result)
        if result.stdout:
            json.loads(result.stdout)
        else:
            assert len(result.stderr.splitlines()) == 1


def _deepspeed_reference(entry: dict, data: dict) -> str | None:
    """The DeepSpeed config path a launcher config names, as written (None: inline, or no DeepSpeed)."""
    if entry["kind"] == "accelerate":
        return (data.get("deepspeed_config") or {}).get("deepspeed_config_file")
    if entry["kind"] == "llamafactory":
        return data.get("deepspeed") or (data.get("dist_config") or {}).get("config_file")
    return data.get("deepspeed")


@pytest.mark.parametrize("entry", LAUNCHERS, ids=_id)
def test_the_deepspeed_config_a_launcher_names_is_in_the_corpus(entry):
    data = yaml.safe_load((FIELD / entry["file"]).read_text(encoding="utf-8")) or {}
    ref = _deepspeed_reference(entry, data)
    if ref is None:
        return
    # Relative to the repository root (axolotl, LLaMA-Factory) or to the launcher file (Accelerate).
    candidates = {posixpath.normpath(ref), posixpath.normpath(posixpath.join(posixpath.dirname(entry["path"]), ref))}
    hits = [d for d in DEEPSPEED if d["repo"] == entry["repo"] and d["path"] in candidates]
    assert hits, f"{entry['file']} names {ref}, which is not in tests/data/field/deepspeed"


def test_every_axolotl_zero3_config_is_read(runner):
    zero3 = [d for d in DEEPSPEED if d["repo"] == "axolotl-ai-cloud/axolotl" and "zero3" in d["path"]]
    assert len(zero3) == 4
    for entry in zero3:  # sub_group_size 0 and max_live_parameters 0, both ge=0 in DeepSpeed
        result = runner.invoke(app, ["estimate", "--deepspeed-config", str(FIELD / entry["file"]), *RUN, "-f", "json"])
        assert result.exit_code == 0, result.output
