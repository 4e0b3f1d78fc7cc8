"""render.pin_widths: every table the CLI prints looks exactly as rich lays it out by measuring."""

import io

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from zeroplan import cli, cli_advise, cli_sweep, render
from zeroplan.cli import app
from zeroplan.tables import Pinned

COMMANDS = [
    ["estimate", "--params", "9e9", "--gpus", "8"],
    ["estimate", "--model", "gemma2-9b", "--checkpointing", "selective", "--offload-optimizer", "cpu"],
    ["estimate", "--model", "t5-3b", "--engine", "fsdp", "--hardware", "a100-sxm-40gb"],
    ["estimate", "--params", "7e9", "--method", "deepspeed"],
    ["advise", "--model", "llama-3.1-8b", "--topology", "pcie"],
    ["capacity", "--model", "llama-2-7b", "--hardware", "l40s-48gb"],
    ["throughput", "--model", "llama-3.1-70b", "--gpus", "64", "--nodes", "8"],
    ["check", "configs/plans/gemma2-9b-zero0-8xh100.yaml"],
    ["sweep", "--params", "9e9", "--hardware", "h100-sxm-80gb"],
    ["models"],
    ["hardware"],
]


@pytest.mark.parametrize("width", [40, 110])  # wraps; the CLI's width off a terminal
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_pinned_widths_print_what_rich_measures(runner, monkeypatch, argv, width):
    monkeypatch.setattr(cli, "PIPE_WIDTH", width)
    pinned = runner.invoke(app, argv)
    monkeypatch.setattr(render, "pin_widths", lambda part, max_width: part)
    measured = runner.invoke(app, argv)
    assert pinned.exit_code == measured.exit_code == (1 if argv[0] == "check" else 0)  # the example plan does not fit
    assert pinned.stdout.strip() and pinned.stdout == measured.stdout


def test_pins_only_a_table_that_fits():
    table = Table("name", "GiB")
    table.add_row("parameters", Text("16.76", style="bold"))
    assert isinstance(render.pin_widths(table, 80), Pinned)
    assert [c.width for c in table.columns] == [10, 5]  # the widest cell of each column
    wide = Table("name")
    wide.add_row("x" * 100)
    assert render.pin_widths(wide, 80) is wide
    assert wide.columns[0].width is None  # must wrap: rich measures and collapses it
    assert render.pin_widths("not a table", 80) == "not a table"


def _parts(monkeypatch, runner, argv):
    """The renderables a command prints, built afresh on each call (pin_widths changes the tables it pins)."""
    shown = []
    for module in (cli, cli_advise, cli_sweep):  # each imported _show by name
        monkeypatch.setattr(module, "_show", lambda data, renderables, fmt: shown.append(renderables))
    runner.invoke(app, argv)
    return shown[0] if shown else None


@pytest.mark.parametrize("width", [40, 110])
@pytest.mark.parametrize("argv", [a for a in COMMANDS if a[0] != "check"], ids=lambda a: " ".join(a[:3]))
def test_drawn_tables_match_rich_in_characters_and_styles(runner, monkeypatch, argv, width):
    # In colour, byte for byte: what tables.Pinned draws is what rich's Table draws, escape codes included.
    build = _parts(monkeypatch, runner, argv)
    assert build is not None

    def printed(pin: bool) -> str:
        out = io.StringIO()
        console = Console(file=out, width=width, force_terminal=True, color_system="truecolor", markup=False,
                          emoji=False, highlight=False)  # fmt: skip
        for part in build():
            console.print(render.pin_widths(part, width) if pin else part)
        return out.getvalue()

    drawn, measured = printed(True), printed(False)
    assert "\x1b[" in measured and drawn == measured
