"""click's own usage errors (an unknown option, a value outside a choice) reach the user as zeroplan's own errors do:
one 'error:' line on stderr, exit 2, control characters printed as text (zeroplan/cli/app.py main)."""

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeroplan", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [
    ("estimate", "--bogus"),
    ("estimate", "--engine", "foo"),
    ("advise", "--policy", "foo"),
    ("estimate", "--gpus"),  # an option without its value
    ("nosuchcommand",),
])
def test_a_usage_error_is_one_line_on_stderr_and_exit_2(args):
    done = _run(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr


def test_a_value_from_outside_is_printed_as_text():
    done = _run("estimate", "--engine", "\x1b[31mred")
    assert "\x1b" not in done.stderr and "\\x1b[31mred" in done.stderr


def test_bare_zeroplan_still_shows_the_help_and_help_still_exits_0():
    bare = _run()
    assert bare.returncode == 2 and bare.stderr.startswith("Usage: zeroplan")
    helped = _run("estimate", "-h")
    assert helped.returncode == 0 and "Usage: zeroplan estimate" in helped.stdout
