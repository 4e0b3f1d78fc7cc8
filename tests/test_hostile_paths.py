"""Hostile paths, outputs and environment found by the probe (benchmarks/hostile_probe.py), each pinned at the edge
that now refuses it: one error line, exit 1 or 2, no traceback, nothing written over (docs/hardening.md, "Edges")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_hostile_edges import CALIBRATE, one_error_line
from zeroplan.cli.app import app


# --- nothing the user had is lost: two outputs on one file, an output over an input ---------------------------------

PLAN = Path(__file__).parent.parent / "configs" / "plans" / "article-gemma2-9b-8xh100.yaml"
CLASHES = [
    (["advise", "--model", "gpt2", "--emit-deepspeed", "out.json", "--html", "./out.json"],
     "--html and --emit-deepspeed both write out.json; give each its own file", []),
    (["check", "plan.yaml", "-f", "json", "-o", "plan.yaml"],
     "--output plan.yaml is a plan this command reads; refusing to write over an input, even with --force", ["plan.yaml"]),
    (["check", "--model", "gpt2", "--deepspeed-config", "ds.json", "-f", "json", "-o", "ds.json"],
     "--output ds.json is --deepspeed-config this command reads; refusing to write over an input, even with --force",
     ["ds.json"]),
    (["advise", "--from", "train.yaml", "--html", "train.yaml"],
     "--html train.yaml is --from this command reads; refusing to write over an input, even with --force", ["train.yaml"]),
    (["calibrate", "stats.json", "--model", "gpt2", "--stage", "3", "--save", "stats.json"],
     "--save stats.json is a record this command reads; refusing to write over an input, even with --force", ["stats.json"]),
]  # fmt: skip
INPUT_FILES = {"plan.yaml": PLAN.read_text(encoding="utf-8"), "ds.json": '{"train_micro_batch_size_per_gpu": 1}\n',
               "train.yaml": "base_model: gpt2\nsequence_len: 512\n",
               "stats.json": (CALIBRATE / "memory_stats.json").read_text(encoding="utf-8")}  # fmt: skip


@pytest.mark.parametrize(("args", "message", "inputs"), CLASHES, ids=[c[0][0] + "-" + c[1][:14] for c in CLASHES])
@pytest.mark.parametrize("force", [False, True])
def test_an_output_on_another_output_or_an_input_is_refused_before_any_write(runner, tmp_path, monkeypatch, args,
                                                                             message, inputs, force):
    monkeypatch.chdir(tmp_path)
    for name in inputs:
        (tmp_path / name).write_text(INPUT_FILES[name], encoding="utf-8")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    res = runner.invoke(app, [*args, *(["--force"] if force else [])])
    assert res.exit_code == 2 and f"error: {message}" in res.stderr.splitlines(), res.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written, nothing replaced


@pytest.mark.skipif(os.name != "posix", reason="file names as bytes are POSIX")
def test_an_undecodable_file_name_byte_is_written_and_shown_escaped(tmp_path):
    """argv bytes that are not UTF-8 arrive as lone surrogates: the HTML holds them as text, the wrote line escapes."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "LC_ALL": "C.UTF-8"}
    res = subprocess.run([sys.executable, "-m", "zeroplan", "estimate", "--model", "gpt2", "--stage", "3", "--html",
                          b"r\xfe\x1b.html"], capture_output=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr.decode("utf-8", "replace")
    assert res.stderr == b"wrote r\\udcfe\\x1b.html: HTML report\n"
    (report,) = tmp_path.iterdir()
    assert os.fsencode(report.name) == b"r\xfe\x1b.html"
    assert "--html &#x27;r\\udcfe\\x1b.html&#x27;" in report.read_text(encoding="utf-8")


@pytest.mark.parametrize(("text", "shown"), [
    ("a\u200fb\u200ec\u061cd", "a\\u200fb\\u200ec\\u061cd"),  # RLM, LRM, ALM: they reorder the text around them
    ("gp\u200bt2\u2060\ufeff", "gp\\u200bt2\\u2060\\ufeff"),  # invisible: 'gp\u200bt2' would show as gpt2
    ("\U0001f469\u200d\U0001f4bb \u0645\u200c\u06cc", "\U0001f469\u200d\U0001f4bb \u0645\u200c\u06cc"),  # ZWJ, ZWNJ kept
])  # fmt: skip
def test_printable_escapes_the_bidi_marks_and_invisible_characters(text, shown):
    from zeroplan.printable import printable

    assert printable(text) == shown


# --- check's globs: ** never follows a link to a directory; at most MAX_PLAN_FILES --------------------------------

@pytest.mark.skipif(not hasattr(os, "symlink") or os.name != "posix", reason="symbolic links to directories are POSIX")
@pytest.mark.parametrize("pattern", ["**/*.yaml", "./**/p.yaml", "a/**/*.nomatch"])
def test_a_recursive_glob_through_links_to_parents_does_not_explode(runner, tmp_path, monkeypatch, pattern):
    """Two links to the parent made glob.glob walk 2^40 paths (a hang); the walk now follows neither."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "p.yaml").write_text(PLAN.read_text(encoding="utf-8"), encoding="utf-8")
    for link in ("up", "up2", "up3"):
        (tmp_path / "a" / link).symlink_to("..")
    res = runner.invoke(app, ["check", pattern, "-f", "json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    files = [p["file"] for p in json.loads(res.stdout)["plans"]]
    assert files == ([pattern] if "nomatch" in pattern else [os.path.join(*pattern.split("/")[:-2], "a", "p.yaml")])


def test_a_glob_matching_more_plans_than_the_bound_is_a_usage_error(runner, tmp_path, monkeypatch):
    from zeroplan.check import globs

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(globs, "MAX_PLAN_FILES", 3)
    for n in range(4):
        (tmp_path / f"p{n}.yaml").write_text("", encoding="utf-8")
    res = runner.invoke(app, ["check", "*.yaml"])
    assert one_error_line(res, 2) == "error: *.yaml: matches more than 3 files; give a narrower glob"


# --- the environment ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("setting", ["/nonexistent/zeroplan-presets", "FILE", "\x1b[31mred"])
def test_a_config_dir_setting_that_is_no_folder_is_refused_not_ignored(runner, tmp_path, monkeypatch, setting):
    """Ignored, ZEROPLAN_CONFIG_DIR's presets silently gave way to the bundled ones of the same name."""
    from zeroplan.printable import printable
    from zeroplan.registry import CONFIG_DIR_ENV, preset_paths

    value = str(tmp_path / "file") if setting == "FILE" else setting
    (tmp_path / "file").write_text("", encoding="utf-8")
    monkeypatch.setenv(CONFIG_DIR_ENV, value)
    preset_paths.cache_clear()
    try:
        for command in (["estimate", "--model", "gpt2"], ["models"], ["hardware"]):
            res = runner.invoke(app, command)
            assert one_error_line(res, 1) == (f"error: ZEROPLAN_CONFIG_DIR={printable(value)}: not a directory (it "
                                              "holds models/ and hardware/ presets); fix or unset it")
    finally:
        preset_paths.cache_clear()


# --- a name the OS refuses, from a file or typed ---------------------------------------------------------------------

@pytest.mark.parametrize("written", ["a" * 5000 + ".json", "a\\0b.json"], ids=["too-long", "nul"])
def test_a_deepspeed_path_the_os_refuses_in_a_from_file_is_one_line_naming_the_key(runner, tmp_path, written):
    (tmp_path / "train.yaml").write_text(f'base_model: gpt2\nsequence_len: 512\ndeepspeed: "{written}"\n', encoding="utf-8")
    line = one_error_line(runner.invoke(app, ["estimate", "--from", str(tmp_path / "train.yaml")]), 1)
    assert line.startswith(f"error: {tmp_path / 'train.yaml'}: deepspeed: ") and "not found beside the file" in line


def test_an_os_error_naming_an_input_file_is_its_line_not_an_output_error(runner, monkeypatch):
    """The error boundary turns an OSError with a file name (an input the OS refuses) into one line, exit 1; one
    without (stdout full or gone) is left to the entry point, which says 'cannot write the output'."""
    import errno

    from zeroplan.scenario import answers

    def refuse(*_args, **_kwargs):
        raise OSError(errno.ENAMETOOLONG, "File name too long", "x" * 300)

    monkeypatch.setattr(answers, "estimate", refuse)
    res = runner.invoke(app, ["estimate", "--model", "gpt2"])
    assert one_error_line(res, 1) == f"error: {'x' * 300}: File name too long"


def test_an_output_name_with_a_nul_is_the_writers_one_line(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["estimate", "--model", "gpt2", "--html", "a\x00b.html"])
    assert one_error_line(res, 1) == "error: 'a\\x00b.html': a file name cannot contain a NUL byte"


@pytest.mark.parametrize(("key", "shown"), [("2024-01-01", "datetime.date(2024, 1, 1)"), ("1", "1"), ("null", "None")])
def test_a_policy_file_key_that_yaml_reads_as_no_string_is_one_line(runner, tmp_path, key, shown):
    (tmp_path / "p.yaml").write_text(f"{key}: x\n", encoding="utf-8")
    res = runner.invoke(app, ["advise", "--model", "gpt2", "--policy-file", str(tmp_path / "p.yaml")])
    assert one_error_line(res, 1).startswith(f"error: {tmp_path / 'p.yaml'}: unknown policy key {shown}; keys: ")


# --- mismatched kinds: the one lenient reader, DeepSpeed's, refuses a file with no key DeepSpeed reads --------------

@pytest.mark.parametrize(("text", "said"), [
    ('{"model_type": "gpt2", "n_embd": 768}', "it looks like a Hugging Face model config; give it as --model"),
    ('{"allocated_bytes.all.peak": 1, "reserved_bytes.all.peak": 2}',
     "it looks like a torch.cuda.memory_stats() record; give it to zeroplan calibrate"),
    ('{"r": 8, "target_modules": ["c_attn"]}', "it looks like a peft adapter config; give it as --adapter-config"),
    ('{"learning_rate": 1e-5}', "not a DeepSpeed config"),
])  # fmt: skip
def test_a_file_with_no_key_deepspeed_reads_is_refused_as_a_deepspeed_config(runner, tmp_path, text, said):
    (tmp_path / "x.json").write_text(text, encoding="utf-8")
    res = runner.invoke(app, ["estimate", "--model", "gpt2", "--deepspeed-config", str(tmp_path / "x.json")])
    assert one_error_line(res, 1) == (f"error: {tmp_path / 'x.json'}: no key DeepSpeed reads (train_batch_size, "
                                      f"zero_optimization, bf16, ...): {said}")


@pytest.mark.parametrize("text", ["{}", '{"_comment": "defaults"}', '{"zero_optimization": {"stage": 2}, "x": 1}'])
def test_an_empty_or_commented_deepspeed_config_is_still_read(runner, tmp_path, text):
    (tmp_path / "ds.json").write_text(text, encoding="utf-8")
    res = runner.invoke(app, ["estimate", "--model", "gpt2", "--deepspeed-config", str(tmp_path / "ds.json")])
    assert res.exit_code == 0, res.output


# --- a plan's counts are bounded as the options are ------------------------------------------------------------------

def test_a_plan_or_from_file_count_past_any_real_run_is_refused_as_the_option_is(runner, tmp_path):
    huge = 10**15
    (tmp_path / "plan.yaml").write_text(
        "model: gpt2\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed: {zero_optimization: {stage: 3}, bf16: {enabled: true}}\n"
        f"training: {{seq_len: {huge}, gradient_accumulation_steps: {huge}}}\n", encoding="utf-8")
    (tmp_path / "train.yaml").write_text(f"base_model: gpt2\nsequence_len: 512\ngradient_accumulation_steps: {huge}\n",
                                         encoding="utf-8")
    res = runner.invoke(app, ["check", str(tmp_path / "plan.yaml"), "-f", "json"])
    (finding,) = json.loads(res.stdout)["plans"][0]["findings"]
    assert res.exit_code == 1 and finding["message"] == (
        "training.seq_len: 1,000,000,000,000,000 is past any real run (at most 134,217,728); "
        "training.gradient_accumulation_steps: 1,000,000,000,000,000 is past any real run (at most 1,048,576)")
    for command in ("check", "estimate"):
        res = runner.invoke(app, [command, "--from", str(tmp_path / "train.yaml")])
        assert "gradient_accumulation_steps: 1000000000000000 is past any real run (at most 1,048,576)" in \
            one_error_line(res, 1) or "grad_accum: 1,000,000,000,000,000 is past any real run" in res.stderr
