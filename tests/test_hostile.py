"""Hostile input and faults (docs/hardening.md): special files refused before they are read, reads capped,
huge integers and failed writes as one line, --force destroying nothing, control characters shown as text."""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from zeroplan import readers
from zeroplan.cli import files
from zeroplan.cli.app import app
from zeroplan.errors import SpecError, ZeroplanError
from zeroplan.printable import printable
from zeroplan.registry import bundled_config_dir

POSIX = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs, Unix sockets and /dev are POSIX")
ROOT = Path(__file__).resolve().parent.parent
PLAN = ("params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\n"
        "deepspeed:\n  train_micro_batch_size_per_gpu: 1\n  bf16: {enabled: true}\n  zero_optimization: {stage: 3}\n")


@pytest.fixture
def no_hang():
    """Fail instead of hanging the suite: SIGALRM interrupts an open or read that blocks."""

    def expire(*_args):
        raise TimeoutError("blocked on a special file")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def short_dir():
    """A directory with a short path: a Unix socket's path must fit in about 100 bytes."""
    path = Path(tempfile.mkdtemp(prefix="zp-"))
    yield path
    shutil.rmtree(path)


def special_file(kind: str, where: Path) -> str:
    if kind.startswith("/dev/"):
        return kind
    path = where / f"{kind}.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))  # the socket's file stays after close
    return str(path)


def zeroplan(*args: str, stdout, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real entry point in a child process, for what CliRunner cannot fake: a full or closed stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "zeroplan", *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=60, cwd=cwd, env=env)  # fmt: skip


# --- 8. no hang, whatever the path -------------------------------------------------------------------------

SPECIAL = ["fifo", "socket", "directory", "/dev/zero", "/dev/urandom"]
INPUTS = {
    "model": ["estimate", "--model", "{}"],
    "hardware": ["estimate", "--params", "7e9", "--hardware", "{}"],
    "policy": ["advise", "--params", "7e9", "--policy-file", "{}"],
    "plan": ["check", "{}"],
    "deepspeed": ["check", "--deepspeed-config", "{}", "--params", "7e9"],
}


@POSIX
@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("option", INPUTS)
def test_a_special_file_is_refused_before_it_is_read(runner, option, kind, short_dir, no_hang):
    path = special_file(kind, short_dir)
    res = runner.invoke(app, [arg.replace("{}", path) for arg in INPUTS[option]])
    assert res.exit_code == 1, res.output
    assert path in res.output and ", not a regular file" in res.output and "Traceback" not in res.output
    if option != "plan":  # a plan's problem is its finding in the report; the others are one error line
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@POSIX
def test_a_path_swapped_for_a_fifo_after_its_stat_is_refused_not_waited_on(tmp_path, monkeypatch, no_hang):
    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)
    regular = os.stat(__file__)
    monkeypatch.setattr(os, "stat", lambda *_args, **_kw: regular)  # the check saw a file; the open finds a FIFO
    with pytest.raises(SpecError, match="is a named pipe"):
        readers.read_text(fifo)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs Linux /proc")
def test_the_size_cap_counts_the_bytes_read_not_the_size_reported(monkeypatch):
    assert os.stat("/proc/self/status").st_size == 0  # what /proc reports, whatever it holds
    monkeypatch.setattr(readers, "MAX_FILE_BYTES", 64)
    with pytest.raises(SpecError, match="larger than"):
        readers.read_text(Path("/proc/self/status"))


def test_a_file_past_16_mib_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as out:
        out.truncate(readers.MAX_FILE_BYTES + 1)  # sparse: no disk used
    with pytest.raises(SpecError, match="larger than 16 MiB"):
        readers.read_text(big)


READ_CALLS = {"open", "fdopen", "read_text", "read_bytes"}
OWN_IO = {"readers.py", "cli/files.py"}  # the one reader, and the one writer


def _opens_devnull(call: ast.Call) -> bool:
    return bool(call.args) and ast.unparse(call.args[0]) == "os.devnull"  # the CLI's SIGPIPE recipe writes there


def test_every_file_read_goes_through_readers_read_text():
    bypass = []
    for path in sorted((ROOT / "zeroplan").rglob("*.py")):
        name = path.relative_to(ROOT / "zeroplan").as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Name) and func.id == "open":
                bypass.append(f"{name}:{node.lineno} open(")
            elif isinstance(func, ast.Attribute) and func.attr in READ_CALLS and not _opens_devnull(node):
                if not (isinstance(func.value, ast.Name) and func.value.id == "readers"):
                    bypass.append(f"{name}:{node.lineno} .{func.attr}(")
    assert [b for b in bypass if b.split(":")[0] not in OWN_IO] == []


# --- 9. no traceback -----------------------------------------------------------------------------------------

LONG = "9" * 5000  # past Python's 4,300-digit limit on int("..."), which json and yaml call


@pytest.mark.parametrize(("text", "origin", "where"), [
    (f"a:\n  b: [1, {LONG}]\n", "f.yaml", "a.b.1"),
    (f"? {LONG}\n: 1\n", "f.yaml", "a key"),
    (f"{LONG}\n", "f.yaml", r"\(top level\)"),
    (f'{{"a": {{"b": [1, -{LONG}]}}}}', "f.json", "a.b.1"),
])  # fmt: skip
def test_an_integer_past_pythons_digit_limit_names_the_file_and_key(text, origin, where):
    parse = readers.parse_json if origin.endswith(".json") else readers.parse_yaml
    with pytest.raises(SpecError, match=rf"^{origin}: {where}: an integer of 5,000 digits"):
        parse(text, origin)


LONG_INPUTS = {
    "model": (["estimate", "--model", "./m.yaml"], "m.yaml", f"name: m\nnum_layers: {LONG}\n", "num_layers"),
    "hf-config": (["estimate", "--model", "./config.json"], "config.json", f'{{"hidden_size": {LONG}}}', "hidden_size"),
    "hardware": (["estimate", "--params", "7e9", "--hardware", "./hw.yaml"], "hw.yaml", f"memory_gib: {LONG}\n", "memory_gib"),
    "policy": (["advise", "--params", "7e9", "--policy-file", "p.yaml"], "p.yaml", f"min_headroom_pct: {LONG}\n", "min_headroom_pct"),
    "deepspeed": (["check", "--deepspeed-config", "ds.json", "--params", "7e9"], "ds.json",
                  f'{{"zero_optimization": {{"stage": {LONG}}}}}', "zero_optimization.stage"),
}  # fmt: skip


@pytest.mark.parametrize("option", LONG_INPUTS)
def test_a_long_integer_in_any_input_is_one_error_line(runner, tmp_path, monkeypatch, option):
    args, name, text, key = LONG_INPUTS[option]
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(text, encoding="utf-8")
    res = runner.invoke(app, args)
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert res.stderr.strip().splitlines() == [f"error: {name}: {key}: an integer of 5,000 digits; Python reads at most 4,300"]


def test_check_reports_a_long_integer_and_still_checks_the_other_plans(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.yaml").write_text(PLAN, encoding="utf-8")
    (tmp_path / "long.yaml").write_text(PLAN + f"min_headroom_pct: {LONG}\n", encoding="utf-8")
    (tmp_path / "ds.json").write_text(f'{{"zero_optimization": {{"stage": {LONG}}}}}', encoding="utf-8")
    (tmp_path / "uses-ds.yaml").write_text(PLAN.split("deepspeed:")[0] + "deepspeed: ds.json\n", encoding="utf-8")
    res = runner.invoke(app, ["check", "good.yaml", "long.yaml", "uses-ds.yaml", "-f", "json"])
    assert res.exit_code == 1, res.output
    plans = {p["file"]: p for p in json.loads(res.stdout)["plans"]}
    assert {name: p["status"] for name, p in plans.items()} == {"good.yaml": "pass", "long.yaml": "fail", "uses-ds.yaml": "fail"}
    assert plans["long.yaml"]["findings"][0]["message"].startswith("min_headroom_pct: an integer of 5,000 digits")
    assert plans["uses-ds.yaml"]["findings"][0]["message"].startswith("ds.json: zero_optimization.stage: an integer of 5,000")


@POSIX
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_full_stdout_is_one_error_line(fmt):
    with open("/dev/full", "w") as full:
        res = zeroplan("models", "-f", fmt, stdout=full)
    assert (res.returncode, res.stderr) == (1, "error: cannot write the output: No space left on device\n")


@POSIX
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_closed_pipe_exits_1_without_a_word(fmt):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write, as after `| head -1`
    try:
        res = zeroplan("models", "-f", fmt, stdout=write)
    finally:
        os.close(write)
    assert (res.returncode, res.stderr) == (1, "")


@POSIX
def test_a_closed_stdout_is_one_error_line():
    res = subprocess.run(["sh", "-c", 'exec "$0" -m zeroplan models >&-', sys.executable], stderr=subprocess.PIPE,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert (res.returncode, res.stderr) == (1, "error: cannot write the output: stdout is closed\n")


# --- 10. nothing destroyed -------------------------------------------------------------------------------------

EMITS = {
    "deepspeed": ["advise", "--params", "7e9", "--emit-deepspeed", "out.json"],
    "accelerate": ["advise", "--params", "7e9", "--engine", "fsdp", "--emit-accelerate", "out.yaml"],
    "check": ["check", str(ROOT / "configs" / "plans" / "article-gemma2-9b-8xh100.yaml"), "-f", "junit", "-o", "out.xml"],
}


@POSIX
@pytest.mark.parametrize("command", EMITS)
def test_a_file_asked_for_is_written_before_stdout_fails(tmp_path, command):
    read, write = os.pipe()
    os.close(read)
    try:
        zeroplan(*EMITS[command], stdout=write, cwd=tmp_path)
    finally:
        os.close(write)
    (written,) = tmp_path.iterdir()
    assert written.name.startswith("out.") and written.read_text(encoding="utf-8").endswith("\n")


@pytest.mark.parametrize("option", ["--emit-deepspeed", "--emit-accelerate"])
def test_an_empty_emit_path_is_a_usage_error(runner, option):
    engine = ["--engine", "fsdp"] if option == "--emit-accelerate" else []
    res = runner.invoke(app, ["advise", "--params", "7e9", *engine, option, ""])
    assert res.exit_code == 2 and f"{option} needs a file path" in res.stderr, res.output


@POSIX
@pytest.mark.parametrize("kind", ["fifo", "socket", "directory"])
def test_force_never_replaces_a_special_file(short_dir, kind):
    path = Path(special_file(kind, short_dir))
    before = os.lstat(path)
    with pytest.raises(ZeroplanError, match="refusing to replace it, even with --force"):
        files.write_new_file(path, "{}", force=True)
    assert os.lstat(path).st_mode == before.st_mode and sorted(os.listdir(short_dir)) == [path.name]


def test_force_never_replaces_a_device(tmp_path, monkeypatch):
    # A stand-in: this suite may run as root, where replacing a real /dev node would succeed.
    target, real_lstat = tmp_path / "null", os.lstat
    target.write_text("")
    device = os.stat_result((stat.S_IFCHR | 0o666, *real_lstat(target)[1:]))
    monkeypatch.setattr(os, "lstat", lambda p, *a, **kw: device if Path(p) == target else real_lstat(p, *a, **kw))
    with pytest.raises(ZeroplanError, match="is a character device; refusing"):
        files.write_new_file(target, "{}", force=True)


@POSIX
@pytest.mark.parametrize("dangling", [False, True])
def test_force_refuses_a_symlink_rather_than_cut_it(tmp_path, dangling):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    if not dangling:
        real.write_text("mine")
    link.symlink_to(real)
    with pytest.raises(ZeroplanError, match="is a symbolic link; refusing to replace it"):
        files.write_new_file(link, "{}", force=True)
    assert link.is_symlink() and (dangling or real.read_text() == "mine")


@POSIX
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_written_file_honours_the_umask_and_ends_with_a_newline(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        files.write_new_file(tmp_path / "ds.json", "{}", force=False)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(tmp_path / "ds.json").st_mode) == mode
    assert (tmp_path / "ds.json").read_text() == "{}\n"


# --- 11. nothing injected ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "shown"), [
    ("plain café 中文", "plain café 中文"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("over\rwrite\nline\ttab\x7f\x9b", "over\\rwrite\\nline\\ttab\\x7f\\x9b"),
    ("abc\u202edef\u2028", "abc\\u202edef\\u2028"),  # a bidi override, a line separator
    ("bad\udcffname\ufffe", "bad\\udcffname\\ufffe"),  # an undecodable file-name byte, an XML non-character
])  # fmt: skip
def test_printable_escapes_control_characters_as_visible_text(text, shown):
    assert printable(text) == shown


EVIL = "\x1b[31mred\r"


def test_the_error_line_shows_control_characters_as_text(runner, tmp_path):
    res = runner.invoke(app, ["estimate", "--model", f"./{EVIL}.yaml"])
    assert res.exit_code == 1
    assert res.stderr == "error: \\x1b[31mred\\r.yaml: no such file\n"


@pytest.fixture
def evil_plans(tmp_path, monkeypatch):
    """A plan whose file name, and whose hardware's name, carry an ANSI escape and a carriage return."""
    monkeypatch.chdir(tmp_path)
    hardware = (bundled_config_dir() / "hardware" / "l4-24gb.yaml").read_text(encoding="utf-8")
    (tmp_path / "hw.yaml").write_text(hardware.replace("name: l4-24gb", 'name: "\\e[31mred\\r"'), encoding="utf-8")
    (tmp_path / f"{EVIL}.yaml").write_text(PLAN.replace("h100-sxm-80gb", "./hw.yaml") + "min_headroom_pct: 99\n",
                                           encoding="utf-8")  # fmt: skip
    (tmp_path / "broken.yaml").write_text(PLAN.replace("h100-sxm-80gb", f'"./{EVIL}hw.yaml"'.replace("\x1b", "\\e")
                                                       .replace("\r", "\\r")), encoding="utf-8")  # fmt: skip
    return [f"{EVIL}.yaml", "broken.yaml"]


@pytest.mark.parametrize("fmt", ["text", "github", "junit"])
def test_check_reports_show_control_characters_as_text(runner, evil_plans, fmt):
    res = runner.invoke(app, ["check", *evil_plans, "-f", fmt])
    assert res.exit_code == 1, res.output
    assert "\x1b" not in res.stdout and "\r" not in res.stdout
    assert "\\x1b[31mred\\r.yaml" in res.stdout  # the plan's name
    assert "\\x1b[31mred\\rhw.yaml: no such file" in res.stdout  # a path from the plan, echoed in a message
    if fmt == "text":  # a name printed in tables may not hold control characters: refused where it is read
        assert "hw.yaml: name: a name may not hold control characters, got '\\x1b[31mred\\r'" in res.stdout
    if fmt == "junit":
        names = [case.get("name") for case in ET.fromstring(res.stdout).iter("testcase")]
        assert names == ["\\x1b[31mred\\r.yaml", "broken.yaml"]


def test_check_json_keeps_the_exact_names(runner, evil_plans):
    res = runner.invoke(app, ["check", *evil_plans, "-f", "json"])
    assert [p["file"] for p in json.loads(res.stdout)["plans"]] == evil_plans  # JSON escapes them itself
