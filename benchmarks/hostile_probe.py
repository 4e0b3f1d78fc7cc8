"""The hostile-input probe (docs/hardening.md, "Edges"): every input path and option of the CLI, and every argument of
the Python API, given hostile values; prints each outcome that breaks the contract (a traceback, an exit code other
than 0, 1 or 2, more than one error line, a control character in the output, a hang past 30 s) and a count.

    /work/venv/bin/python benchmarks/hostile_probe.py [files] [options] [hardware] [api]

files:    hostile contents (empty, not UTF-8, UTF-16, NUL, alias and merge bombs, deep nesting, python tags, long
          integers, huge floats, pickles) and special paths (FIFO, directory, /dev/zero, /dev/stdin, symlink loop,
          dangling link, 70 MiB, a control character or 5,000 characters in the name) x every option that reads a file.
options:  every valued option of every command x hostile strings (blank, commas, nan, 1e400, 5,000 digits, ANSI and
          OSC 8 escapes, RTL override, Arabic-Indic digits, ranges, /dev/zero).
hardware: every numeric field of a hardware file x hostile numbers, through estimate, throughput, advise, capacity.
api:      every argument of zeroplan.estimate, recommend, check_plans, count_params, load_model, load_hardware, to_dict.
Slow (minutes): the suite runs the cases it found, pinned, in tests/test_hostile_edges.py and test_hostile_paths.py.
"""

from __future__ import annotations

import inspect
import os
import pickle
import re
import signal
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import typer  # noqa: E402
import yaml  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import zeroplan  # noqa: E402
from zeroplan.cli.app import app  # noqa: E402
from zeroplan.errors import ZeroplanError  # noqa: E402
from zeroplan.printable import brief  # noqa: E402

CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
LONG = "9" * 5000
BOMB = "a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"a{i}: &a{i} [{','.join([f'*a{i - 1}' if i else '*a'] * 9)}]\n" for i in range(8))
CONTENTS = {
    "empty": b"", "blank": b"  \n\n", "null": b"null\n", "list": b"[1, 2]\n", "int": b"42\n", "latin1": b"name: caf\xe9\n",
    "utf16": "name: x\n".encode("utf-16"), "bom": b"\xef\xbb\xbfname: x\n", "nul": b"a: 1\x00\n", "bomb": BOMB.encode(),
    "deep": b"[" * 60 + b"]" * 60, "deepblock": "".join(" " * i + f"k{i}:\n" for i in range(2000)).encode(),
    "deepjson": b'{"a":' * 5000 + b"1" + b"}" * 5000, "pytag": b"a: !!python/object/apply:os.system ['true']\n",
    "tag": b"a: !foo 1\n", "dup": b"a: 1\na: 2\n", "nan": b'{"a": NaN, "b": Infinity}', "long": f"a: {LONG}\n".encode(),
    "keys": b"2024-01-01: x\n1: y\nnull: w\n", "binary": b"a: !!binary AAAA\n", "multidoc": b"a: 1\n---\nb: 2\n",
    "badtoml": b"[job\nx=", "badjson": b'{"a": ', "merge": b"b: &b {x: 1}\nc:\n  <<: *b\n", "bigfloat": b"a: 1e400\n",
    "ansi": b'"\\e[31mred\\e]8;;http://x\\a": 1\n', "complexkey": b"? [1]\n: 2\n",
    "longtoml": f"[job]\n[training]\nsteps = {LONG}\n".encode(), "deeptoml": b"[job]\nx = " + b"[" * 5000 + b"]" * 5000,
    "pickle-long": pickle.dumps({"segments": [{"total_size": 10**5000, "allocated_size": 1}]}),
    "pickle-global": pickle.dumps(os.system), "pickle-cut": b"\x80\x05garbage",
    "stats-long": f'{{"allocated_bytes.all.peak": {LONG}}}'.encode(),
    "stats-big": ('{"allocated_bytes.all.peak": 1' + "0" * 400 + ', "reserved_bytes.all.peak": 1}').encode(),
    "ds-log": ("MA 1 GB  Max_MA " + "9" * 400 + " GB  CA 1 GB  Max_CA 2 GB\n").encode(),
    "trainer-log": f"train_mem_gpu_alloc_delta = {LONG}MB\ntrain_mem_gpu_peaked_delta = 1MB\n".encode(),
}  # fmt: skip
SPECIAL = ["fifo.yaml", "dir.yaml", "loop.yaml", "dangling.yaml", "/dev/zero", "/dev/stdin", "/dev/null", "big.yaml",
           "x\x1b[31m.yaml", "a" * 5000 + ".yaml", ""]  # fmt: skip
RECORD = str(ROOT / "tests" / "data" / "calibrate" / "memory_stats.json")
M = ["--model", "gpt2"]
FILE_OPTIONS = {
    "model": ["estimate", "--model", "{}"], "hardware": ["estimate", *M, "--hardware", "{}"],
    "deepspeed": ["estimate", *M, "--deepspeed-config", "{}"], "from": ["estimate", "--from", "{}"],
    "calibration": ["estimate", *M, "--calibration", "{}"], "adapter": ["estimate", *M, "--adapter-config", "{}"],
    "teacher": ["estimate", *M, "--post-training", "kd", "--teacher", "{}"], "policy": ["advise", *M, "--policy-file", "{}"],
    "plan": ["check", "{}"], "check-deepspeed": ["check", *M, "--deepspeed-config", "{}"], "check-from": ["check", "--from", "{}"],
    "record": ["calibrate", "{}", *M, "--stage", "3"], "calibrate-plan": ["calibrate", RECORD, "--plan", "{}"],
    "sweep-model": ["sweep", "--model", "{}", "--gpu-counts", "8"],
}  # fmt: skip
OPTION_VALUES = ["", " ", ",", "-1", "0", "-0", "0.5", "nan", "inf", "1e400", "1e30", "9" * 30, LONG, "2^64", "0x10",
                 "1_000", "1,2", "\u0661", "\x1b[31m", "\x1b]8;;http://evil\x07x\x1b]8;;\x07", "a\u202eb", "true", "none",
                 "auto", "1e-300", "3-1", "1-100000000", "every:0", "/dev/zero"]  # fmt: skip
WRITERS = ("--html", "--emit-deepspeed", "--emit-accelerate", "--emit-torchtitan", "--output", "--save")
BASE = {"estimate": M, "advise": M, "capacity": M, "throughput": M, "sweep": [*M, "--gpu-counts", "8"],
        "check": [*M, "--deepspeed-config", "ds.json"], "models": [], "hardware": [], "calibrate": [RECORD, *M, "--stage", "3"]}
HARDWARE_VALUES = [0, -1, 1e-300, 1e308, 10**30, float("nan"), float("inf"), "x", True, None, [], {}, 2**63]
API_VALUES = [None, True, 0, -1, 10**30, 10**5000, 1.5, float("nan"), float("inf"), "", " ", "\x1b[31m", "nope", [], [1],
              {}, {"a": 1}, object(), b"bytes", Path("/dev/zero"), Path("."), (1, 2), "a" * 5000, "/dev/stdin"]


class Probe:
    def __init__(self) -> None:
        self.runner, self.cases, self.broken = CliRunner(), 0, 0
        signal.signal(signal.SIGALRM, self._expire)

    @staticmethod
    def _expire(*_args) -> None:
        raise TimeoutError("hang")

    def report(self, what: str, problems: list[str]) -> None:
        self.cases += 1
        if problems:
            self.broken += 1
            print(f"{what}: {'; '.join(problems)}", flush=True)

    def cli(self, args: list[str]) -> None:
        signal.alarm(30)
        try:
            res = self.runner.invoke(app, args)
        except TimeoutError:
            return self.report(brief(args, 120), ["HANG"])
        finally:
            signal.alarm(0)
        problems = []
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            problems.append("traceback: " + "".join(traceback.format_exception(res.exception)[-2:]).replace("\n", " | ")[-300:])
        if res.exit_code not in (0, 1, 2):
            problems.append(f"exit {res.exit_code}")
        if CONTROL.search(res.stdout.replace("\n", "")) or CONTROL.search(res.stderr.replace("\n", "")):
            problems.append("a control character in the output")
        errors = [line for line in res.stderr.splitlines() if line.startswith(("error:", "Error:"))]
        if res.exit_code and args[0] != "check" and len(errors) != 1:
            problems.append("not one error line: " + res.stderr[:200].replace("\n", " / "))
        self.report(brief(args, 120), problems)

    def api(self, fn, kwargs: dict) -> None:
        signal.alarm(30)
        try:
            fn(**kwargs)
            problems = []
        except ZeroplanError as exc:
            problems = [] if str(exc).strip() and "\n" not in str(exc) else ["not one line: " + brief(str(exc))]
        except TimeoutError:
            problems = ["HANG"]
        except Exception as exc:  # noqa: BLE001 - what the probe looks for
            problems = [f"{type(exc).__name__}: {brief(str(exc), 100)} at {traceback.format_exc().splitlines()[-3].strip()[:100]}"]
        finally:
            signal.alarm(0)
        self.report(f"{fn.__name__}({brief(kwargs, 100)})", problems)


def make_files(where: Path) -> None:
    for name, data in CONTENTS.items():
        for ext in (".yaml", ".json", ".toml", ".pickle", ".log"):
            (where / f"{name}{ext}").write_bytes(data)
    os.mkfifo(where / "fifo.yaml")
    (where / "dir.yaml").mkdir()
    os.symlink("loop.yaml", where / "loop.yaml")
    os.symlink("nowhere.yaml", where / "dangling.yaml")
    with open(where / "big.yaml", "wb") as big:
        big.truncate(70 * 2**20)  # sparse: past every size cap
    (where / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1}\n')


def files(probe: Probe) -> None:
    for option, template in FILE_OPTIONS.items():
        for name in [f"{c}{ext}" for c in CONTENTS for ext in (".yaml", ".json", ".toml", ".pickle", ".log")] + SPECIAL:
            probe.cli([arg.replace("{}", name) for arg in template])


def options(probe: Probe) -> None:
    for command, cmd in typer.main.get_command(app).commands.items():
        for param in cmd.params:
            flag = param.opts[0] if param.opts else ""
            if not flag.startswith("--") or getattr(param, "is_flag", False) or flag in WRITERS:
                continue
            for value in OPTION_VALUES:
                probe.cli([command, *(BASE[command] if flag not in ("--model", "--params") else []), flag, value])


def hardware(probe: Probe, where: Path) -> None:
    from zeroplan.readers import parse_yaml

    base = parse_yaml((ROOT / "configs" / "hardware" / "h100-sxm-80gb.yaml").read_text(encoding="utf-8"), "h100")
    for key in [k for k in base if k not in ("name", "source")]:
        for value in HARDWARE_VALUES:
            (where / "hw.yaml").write_text(yaml.safe_dump({**base, key: value}), encoding="utf-8")
            for command in ("estimate", "throughput", "advise", "capacity"):
                probe.cli([command, *M, "--hardware", str(where / "hw.yaml")])


def api(probe: Probe) -> None:
    bases = {"estimate": {"model": "gpt2", "stage": 3}, "recommend": {"model": "gpt2"}}
    for name in ("estimate", "recommend", "check_plans", "count_params", "load_model", "load_hardware", "to_dict"):
        fn = getattr(zeroplan, name)
        for param in inspect.signature(fn).parameters.values():
            if param.name == "search_parallelism" or param.kind is param.VAR_KEYWORD:
                continue
            for value in API_VALUES:
                base = {k: v for k, v in bases.get(name, {}).items() if param.name not in ("model", "params")}
                call = (lambda f=fn, v=value: f(v)) if param.kind is param.VAR_POSITIONAL else None
                if call is not None:
                    call.__name__ = name
                    probe.api(call, {})
                else:
                    probe.api(fn, {**base, param.name: value})


def main(parts: list[str]) -> int:
    parts = parts or ["files", "options", "hardware", "api"]
    probe = Probe()
    with tempfile.TemporaryDirectory(prefix="zp-hostile-") as tmp:
        where = Path(tmp)
        make_files(where)
        os.chdir(where)
        for part in parts:
            {"files": lambda: files(probe), "options": lambda: options(probe), "hardware": lambda: hardware(probe, where),
             "api": lambda: api(probe)}[part]()  # fmt: skip
    print(f"{probe.cases:,} cases, {probe.broken:,} broke the contract")
    return 1 if probe.broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
