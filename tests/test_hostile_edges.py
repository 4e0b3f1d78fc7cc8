"""Hostile input found by the probe (benchmarks/hostile_probe.py), each pinned at the edge that now refuses it:
one error line on stderr, exit 1 (bad input) or 2 (usage), no traceback (docs/hardening.md, "Edges")."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

import zeroplan
from zeroplan.cli.app import app
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.printable import brief
from zeroplan.readers import parse_toml, parse_yaml
from zeroplan.units import parse_count

CALIBRATE = Path(__file__).parent / "data" / "calibrate"
LONG = "9" * 5000  # past Python's 4,300 digits: int() raises ValueError
BIG = "9" * 400  # converts, but past any GPU; as a float, inf


def SHORT(value: object) -> str:  # noqa: N802 - a test id for values pytest cannot print (str() of 4,300+ digits)
    return brief(value, 24)


def one_error_line(res, code: int) -> str:
    """The one stderr line of a refused command, after checking the exit code and that nothing escaped."""
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == code, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


# --- calibrate: a record's byte counts, however written -----------------------------------------------------------

RECORDS = [
    ("stats-long.json", f'{{"allocated_bytes.all.peak": {LONG}, "reserved_bytes.all.peak": 1}}',
     "allocated_bytes.all.peak: an integer of 5,000 digits; Python reads at most 4,300"),
    ("stats-big.json", f'{{"allocated_bytes.all.peak": {BIG}, "reserved_bytes.all.peak": 1}}',
     "allocated_bytes.all.peak: expected a byte count (a whole number from 0 to 2^60), got <an integer of 1,329 bits>"),
    ("state-big.json", f'{{"log_history": [{{"train_mem_gpu_alloc_delta": {BIG}, "train_mem_gpu_peaked_delta": 1}}]}}',
     "log_history: train_mem_gpu_alloc_delta: expected a whole number of bytes, got <an integer of 1,329 bits>"),
    ("trainer.log", f"train_mem_gpu_alloc_delta = {LONG}MB\ntrain_mem_gpu_peaked_delta = 1MB\n",
     "train_mem_gpu_alloc_delta: '99999999999999999...999999999999999999': a byte count past any GPU"),
    ("trainer-sum.log", "train_mem_gpu_alloc_delta = 9999999999999999999MB\ntrain_mem_gpu_peaked_delta = 1MB\n",
     "the memory metrics sum to 10,485,760,000,000,000,000,000,000 B, past any GPU"),
    ("deepspeed.log", f"MA 1.0 GB  Max_MA {BIG} GB  CA 1.0 GB  Max_CA 2 GB\n",
     "99999999999999999999... GiB: a byte count past any GPU"),
    ("torchtitan.log", f"step: 1  memory: {BIG}GiB(50.00%)\n", "99999999999999999999... GiB: a byte count past any GPU"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "message"), RECORDS, ids=[r[0] for r in RECORDS])
def test_a_record_past_any_gpu_is_one_line(runner, tmp_path, name, text, message):
    (tmp_path / name).write_text(text, encoding="utf-8")
    res = runner.invoke(app, ["calibrate", str(tmp_path / name), "--model", "gpt2", "--stage", "3"])
    assert one_error_line(res, 1) == f"error: {tmp_path / name}: {message}"


@pytest.mark.parametrize("size", [10**5000, 2**60, -1], ids=["5000-digits", "2^60", "negative"])
def test_a_snapshot_pickle_with_a_bad_byte_count_is_one_line(runner, tmp_path, size):
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps({"segments": [{"total_size": size, "allocated_size": 0}]}))
    res = runner.invoke(app, ["calibrate", str(path), "--model", "gpt2", "--stage", "3"])
    assert f"snap.pickle: segments[0].total_size: expected a byte count, got {brief(size)}" in one_error_line(res, 1)


# --- TOML and YAML at the reader's entry ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    (f"[training]\nsteps = {LONG}\n", "t.toml: an integer of 5,000 digits; Python reads at most 4,300"),
    ("[training]\nx = " + "[" * 5000 + "]" * 5000 + "\n", "t.toml: TOML nested too deeply"),
    ("[job\n", "t.toml: invalid TOML: Expected ']' at the end of a table declaration (at line 1, column 5)"),
])  # fmt: skip
def test_toml_that_tomllib_cannot_convert_is_one_line(text, message):
    pytest.importorskip("tomllib")
    with pytest.raises(ZeroplanError) as exc:
        parse_toml(text, "t.toml")
    assert str(exc.value) == message


def test_a_deep_or_long_torchtitan_file_is_one_line(runner, tmp_path):
    pytest.importorskip("tomllib")
    (tmp_path / "job.toml").write_text(f"[job]\n[training]\nsteps = {LONG}\n", encoding="utf-8")
    res = runner.invoke(app, ["estimate", "--from", str(tmp_path / "job.toml"), "--model", "gpt2"])
    assert "job.toml: an integer of 5,000 digits" in one_error_line(res, 1)


def test_yaml_merge_keys_read_as_yaml_safe_load_reads_them():
    import yaml

    text = "base: &b {x: 1, y: 2}\nd: &d {z: 3}\nrun:\n  <<: [*b, *d]\n  y: 5\n"
    assert parse_yaml(text, "f.yaml") == yaml.safe_load(text) == {
        "base": {"x": 1, "y": 2}, "d": {"z": 3}, "run": {"x": 1, "y": 5, "z": 3}}


@pytest.mark.parametrize(("text", "message"), [
    ("run:\n  <<: {a: 1}\n  <<: {b: 1}\n", "duplicate key '<<'"),
    ("run:\n  <<: {a: 1}\n  x: 1\n  x: 2\n", "duplicate key 'x'"),
    ("run: {<<: 5}\n", "expected a mapping or list of mappings for merging"),
])  # fmt: skip
def test_a_merge_key_keeps_the_duplicate_key_rule(text, message):
    with pytest.raises(ZeroplanError, match=message):
        parse_yaml(text, "f.yaml")


def test_a_from_file_with_a_merge_key_reads_as_the_same_file_written_out(runner, tmp_path):
    written = "base_model: gpt2\nsequence_len: 512\nmicro_batch_size: 2\nadapter: lora\nlora_r: 8\nlora_target_modules: [c_attn]\n"
    merged = "common: &c\n  sequence_len: 512\n  micro_batch_size: 2\nbase_model: gpt2\n<<: *c\nadapter: lora\nlora_r: 8\n" \
             "lora_target_modules: [c_attn]\n"
    outputs = []
    for name, text in (("plain.yaml", written), ("merged.yaml", merged)):
        (tmp_path / name).write_text(text, encoding="utf-8")
        res = runner.invoke(app, ["estimate", "--from", str(tmp_path / name), "-f", "json"])
        assert res.exit_code == 0, res.output
        data = json.loads(res.stdout)
        outputs.append((data["stages"], data["setup"]))
    assert outputs[0] == outputs[1]
    assert (outputs[1][1]["seq_len"], outputs[1][1]["micro_batch"]) == (512, 2)  # the merged keys were read


# --- an option typed with nothing in it: refused, never dropped -------------------------------------------------

BLANK = [
    (["estimate", "--model", "gpt2", "--adapter-config", ""], "--adapter-config needs a value, got ''"),
    (["estimate", "--model", "gpt2", "--calibration", " "], "--calibration needs a value, got ' '"),
    (["estimate", "--model", "gpt2", "--deepspeed-config", ""], "--deepspeed-config needs a value, got ''"),
    (["estimate", "--model", "gpt2", "--largest-layer", ""], "--largest-layer needs a value, got ''"),
    (["estimate", "--model", "gpt2", "--freeze", ","], "--freeze needs a value, got ','"),
    (["estimate", "--model", "gpt2", "--lora-rank", "8", "--lora-targets", " , "], "--lora-targets needs a value, got ' , '"),
    (["advise", "--model", "gpt2", "--policy-file", ""], "--policy-file needs a value, got ''"),
    (["throughput", "--model", "gpt2", "--sweep", ","], "--sweep needs a value, got ','"),
    (["throughput", "--model", "gpt2", "--sweep", ""], "--sweep needs a value, got ''"),
    (["sweep", "--model", "gpt2", "--stages", ","], "--stages needs a value, got ','"),
    (["check", "--model", "gpt2", "--from", ""], "--from needs a value, got ''"),
    (["check", "--model", "gpt2", "--ignore", ""], "--ignore needs a value, got ''"),
    (["check", " "], "a plan argument needs a value, got ' '"),
    (["advise", "--model", "gpt2", "--emit-deepspeed", " "], "--emit-deepspeed needs a file path, got ' '"),
    (["calibrate", str(CALIBRATE / "memory_stats.json"), "--model", "gpt2", "--stage", "3", "--plan", ""],
     "--plan needs a value, got ''"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), BLANK, ids=[" ".join(a[:1] + a[-2:-1]) for a, _ in BLANK])
def test_an_option_typed_blank_is_a_usage_error(runner, args, message):
    assert one_error_line(runner.invoke(app, args), 2) == f"error: {message}"


@pytest.mark.parametrize(("argument", "value"), [("adapter_config", ""), ("freeze", []), ("freeze", ","),
                                                 ("lora_targets", [""]), ("calibration", " ")])  # fmt: skip
def test_an_api_argument_given_blank_is_a_usage_error(argument, value):
    with pytest.raises(UsageError, match=f"^--{argument.replace('_', '-')} needs a value, got "):
        zeroplan.estimate(model="gpt2", lora_rank=8 if argument == "lora_targets" else None, **{argument: value})


# --- numbers ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "value"), [("1,024", 1024), ("7,000,000,000", 7 * 10**9), ("1,500.0", 1500),
                                             ("1_0", 10), ("1024", 1024)])  # fmt: skip
def test_a_comma_between_groups_of_three_digits_is_a_thousands_separator(text, value):
    assert parse_count(text, "--gpus") == value


@pytest.mark.parametrize("text", ["1,2", "1,5", "8,16", "12,34,567", ",8", "8,", "1,0000"])
def test_any_other_comma_is_refused_not_dropped(text):
    with pytest.raises(ZeroplanError, match=r"is not one number \(a comma groups thousands: 1,000,000\)$"):
        parse_count(text, "--gpus")


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--lora-rank", "9" * 30, "--lora-rank 999999999999999999999999999999 is past any real run (at most 65,536)"),
    ("--gpus", LONG, "--gpus 99999999999999999999...(5,000 characters) is past any real run (at most 1,048,576)"),
    ("--gpus", "1,2", "--gpus '1,2' is not one number (a comma groups thousands: 1,000,000)"),
])  # fmt: skip
def test_a_count_too_long_to_parse_is_past_its_bound(runner, option, value, message):
    res = runner.invoke(app, ["estimate", "--model", "gpt2", option, value])
    assert one_error_line(res, 1) == f"error: {message}"


@pytest.mark.parametrize(("argument", "value", "message"), [
    ("gpus", 10**5000, "--gpus <an integer of 16,610 bits> is past any real run (at most 1,048,576)"),
    ("params", 10**5000, "--params <an integer of 16,610 bits> is larger than 1e+18"),
    ("cuda_context_gib", 10**400, "--cuda-context-gib <an integer of 1,329 bits> is larger than 1e+18"),
    ("stage", 10**5000, "--stage <an integer of 16,610 bits> is not one of: 0, 1, 2, 3"),
    ("training_loop", "nope", "--training-loop 'nope' is not one of: trainer, litgpt"),
    ("lora_rank", 10**40, "--lora-rank 100000000000000000...0000000000000000000 is past any real run (at most 65,536)"),
], ids=SHORT)  # fmt: skip
def test_an_api_argument_python_cannot_print_or_convert_is_one_line(argument, value, message):
    with pytest.raises(ZeroplanError) as exc:
        zeroplan.estimate(model="gpt2", **{argument: value})
    assert str(exc.value) == message


@pytest.mark.parametrize(("value", "shown"), [
    (10**5000, "<an integer of 16,610 bits>"), (12, "12"), ("\x1b[31m", "'\\x1b[31m'"), ([10**5000] * 50, None),
    ("x" * 1000, None), ({"a": [[[[[[[1]]]]]]]}, "{'a': [[[[[[...]]]]]]}"),
], ids=SHORT)  # fmt: skip
def test_brief_shows_any_value_in_one_short_line(value, shown):
    text = brief(value)
    assert len(text) <= 60 and "\n" not in text and "\x1b" not in text
    assert shown is None or text == shown


# --- every search is bounded ----------------------------------------------------------------------------------------

def test_a_sweep_grid_past_a_million_configurations_is_refused_up_front(runner):
    res = runner.invoke(app, ["sweep", "--model", "gpt2", "--gpu-counts", "1-10", "--micro-batches", "1-1000"])
    assert one_error_line(res, 1) == "error: the grid has 1,080,000 configurations, more than 1,000,000: narrow an axis"


def test_a_global_batch_sweep_past_a_thousand_points_is_refused_up_front(runner):
    res = runner.invoke(app, ["throughput", "--model", "gpt2", "--sweep", ",".join(str(8 * n) for n in range(1, 1002))])
    assert one_error_line(res, 1) == "error: --sweep has 1,001 global batches, more than 1,000: give fewer"

