"""No terminal width cuts a number or a name (cli/common.py `_fit_table`): at 80 and 60 columns every word and
number of the wide output that is printed is printed whole; a table that cannot fit leaves out whole columns
and says which."""

import re

import pytest

from zeroplan.cli.app import app

WIDE = 250
BOX = re.compile(r"[\u2500-\u257f]")  # rich's box-drawing characters
COMMANDS = [
    ["estimate", "--model", "gemma2-9b"],
    ["estimate", "--model", "qwen3-32b", "--seq-len", "4096", "--engine", "fsdp2", "--stage", "3"],
    ["advise", "--model", "qwen3-32b", "--seq-len", "4096"],
    ["advise", "--model", "llama-3.1-8b", "--search-parallelism", "--gpus", "16"],
    ["throughput", "--model", "gemma2-9b"],
    ["capacity", "--model", "gemma2-9b"],
    ["sweep", "--params", "9e9"],
    ["check", "configs/plans/gemma2-9b-zero0-8xh100.yaml", "configs/plans/multinode-zero3.yaml"],
    ["models"],
    ["hardware"],
]


def _at(runner, monkeypatch, command: list[str], width: int) -> str:
    from zeroplan.cli import common

    wide = common.console
    monkeypatch.setattr(common, "console", lambda stderr=False: setattr(c := wide(stderr), "width", width) or c)
    return runner.invoke(app, command).stdout


def _tokens(text: str) -> set[str]:
    kept = re.sub(r"\(left out at .*?shows them\)", " ", text, flags=re.S)  # the note, wrapped or not
    return set(BOX.sub(" ", kept).split())


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]))
def test_no_width_cuts_a_number_or_a_name(runner, monkeypatch, command, width):
    wide, narrow = _at(runner, monkeypatch, command, WIDE), _at(runner, monkeypatch, command, width)
    assert "…" not in narrow and max(map(len, narrow.splitlines())) <= width
    assert sorted(_tokens(narrow) - _tokens(wide)) == []  # every word or number printed is one the wide output has


def test_the_advise_alternatives_at_80_columns_keep_their_numbers_and_name_what_they_leave_out(runner, monkeypatch):
    command = ["advise", "--model", "qwen3-32b", "--seq-len", "4096"]
    out, wide = _at(runner, monkeypatch, command, 80), _at(runner, monkeypatch, command, WIDE)
    # the recommendation's row of the alternatives table, as the wide output prints it: its micro-batch x
    # accumulation and its step time stand whole at 80 columns too
    row = next(line for line in wide.splitlines() if BOX.sub("|", line).replace(" ", "").startswith("|*|"))
    cells = [c.strip() for c in BOX.sub("|", row).split("|") if c.strip()]
    mbs_ga = next(c for c in cells if re.fullmatch(r"\d+ x \d+", c))
    step = cells[cells.index(mbs_ga) + 3]  # mbs x GA, peak GiB, free GiB, step s
    assert mbs_ga in out and step in out
    assert re.search(r"\(left out at 80 columns: [^)]*vs ZeRO-0", " ".join(out.split()))
