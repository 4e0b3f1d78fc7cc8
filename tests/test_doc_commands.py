"""Every `zeroplan ...` command in README.md and docs/*.md runs as shown: exit 0, or the exit code its
comment names ("exit 1"), with no traceback. Run from a scratch folder that sees the repository's configs/
and tests/data/, so commands that write files (--emit-deepspeed ds.json, -o report.xml) write there."""

import re
import shlex
from pathlib import Path

import pytest

from zeroplan.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)


def _commands() -> list[tuple[str, str, int]]:
    found = []
    for doc in DOCS:
        for block in SHELL_BLOCK.findall(doc.read_text(encoding="utf-8")):
            for line in block.splitlines():
                line = line.strip().removeprefix("$ ")
                if not line.startswith("zeroplan "):
                    continue
                command, _, comment = line.partition("  #")
                expected = 1 if re.search(r"\bexit 1\b", comment) else 0
                found.append((doc.relative_to(ROOT).as_posix(), command.strip(), expected))
    return found


COMMANDS = _commands()


def test_the_docs_have_commands_to_run():
    assert len(COMMANDS) >= 15 and any(doc == "README.md" for doc, _, _ in COMMANDS)


@pytest.mark.parametrize(("doc", "command", "expected"), COMMANDS, ids=[f"{d}: {c}" for d, c, _ in COMMANDS])
def test_documented_command_runs_as_shown(runner, tmp_path, monkeypatch, doc, command, expected):
    for name in ("configs", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    argv = []
    for word in shlex.split(command)[1:]:  # the shell expands unquoted globs; zeroplan expands quoted ones
        argv += sorted(str(p) for p in Path().glob(word)) if "*" in word and not command.count(f"'{word}'") else [word]
    result = runner.invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == expected, f"{doc}: {command}\n{result.stderr}"
