"""What every command shares: the consoles, the one error boundary, machine output, the ScenarioArgs out of a command's options."""

import os
import sys
from enum import Enum
from typing import Callable

import typer
from pydantic import ValidationError

from zeroplan.cli.options import Format
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.validate import problems
from zeroplan.version import SCHEMA_VERSION

PIPE_WIDTH = 110  # console width when stdout is not a terminal


def console(stderr: bool = False):
    from rich.console import Console

    tty = (sys.stderr if stderr else sys.stdout).isatty()
    no_color = bool(os.environ.get("NO_COLOR")) or not tty
    # Off a terminal rich assumes 80 columns; the stage tables need more to stay readable in logs.
    width = None if tty else PIPE_WIDTH
    # markup=False: text is never parsed for [style] tags, so a name or message with brackets prints as
    # typed (and cannot raise rich's MarkupError); styles come from Text objects. Also skips that parse
    # for every table cell, as emoji=False skips the :emoji: scan.
    out = Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=False, width=width,
                  markup=False, emoji=False)  # fmt: skip
    out.push_render_hook(_TerminalSafe(out))
    return out


class _TerminalSafe:
    """The output boundary of every console: each renderable printed is laid out by rich, then the text of its
    segments (never rich's own control segments or styles) passes through `printable.terminal_text`, so no string
    from outside -- an option, a file name, a value read from a file -- reaches a terminal with a control
    character, and an encoding without the drawing characters (LANG=C, PYTHONIOENCODING=ascii) gets ASCII."""

    def __init__(self, out) -> None:
        self.encoding = out.encoding

    def process_renderables(self, renderables: list) -> list:  # rich.console.RenderHook
        return [_Escaped(part, self.encoding) for part in renderables]


class _Escaped:
    def __init__(self, part, encoding: str) -> None:
        self.part, self.encoding = part, encoding

    def __rich_console__(self, out, options):
        from rich.segment import Segment

        from zeroplan.printable import terminal_text

        for seg in out.render(self.part, options):
            yield seg if seg.control else Segment(terminal_text(seg.text, self.encoding), seg.style)


def write_out(text: str) -> None:
    """Plain text (markdown, CSV, a check report) on stdout, through the same boundary as the consoles."""
    from zeroplan.printable import terminal_text

    sys.stdout.write(terminal_text(text, getattr(sys.stdout, "encoding", None)))


def print_error(message: str) -> None:
    """One red 'error:' line on stderr; control characters in the message (from input files) printed as text."""
    from rich.text import Text

    from zeroplan.printable import printable

    console(stderr=True).print(Text.assemble(("error:", "red"), " ", printable(message)), soft_wrap=True)


def print_warning(message: str) -> None:
    """One yellow 'warning:' line on stderr: stdout (JSON included) stays the result alone."""
    from rich.text import Text

    from zeroplan.printable import printable

    console(stderr=True).print(Text.assemble(("warning:", "yellow"), " ", printable(message)), soft_wrap=True)


def emit(data: dict, fmt: Format) -> None:
    """Machine output on stdout, nothing else; every document names its schema_version (docs/json.md)."""
    data = data if "schema_version" in data else {"schema_version": SCHEMA_VERSION, **data}
    if fmt is Format.json:
        import json

        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif fmt is Format.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


def run(fn, fmt: Enum | None = None):
    """The one error boundary: ZeroplanError / ValidationError -> one red line on stderr, exit 1 (UsageError: 2).

    With --format json the failure is also a JSON document on stdout ({"schema_version", "error": {"messages",
    "exit_code"}}), so a script reading stdout sees why instead of an empty string.
    """
    try:
        _check_needs()
        return fn()
    except ZeroplanError as exc:
        _fail([str(exc)], 2 if isinstance(exc, UsageError) else 1, fmt)
    except ValidationError as exc:  # one a reader did not turn into a SpecError: one line per problem
        _fail(problems(exc), 1, fmt)
    except OSError as exc:  # a file an input names that the OS refuses (a name too long); stdout's own: app.main
        if exc.filename is None:
            raise
        _fail([f"{exc.filename}: {exc.strerror or exc}"], 1, fmt)


def _fail(messages: list[str], code: int, fmt: Enum | None) -> None:
    for line in messages:
        print_error(line)
    if fmt is not None and fmt.value == "json":
        emit({"error": {"messages": messages, "exit_code": code}}, Format.json)
    raise typer.Exit(code) from None


def _check_needs() -> None:
    """The command's counts past any real run (scenario/bounds.py), then its options given without the option they
    need, a usage error (scenario/requires.py): both before any work."""
    from typer.main import get_current_context  # the context typer hands a command that asks for one

    ctx = get_current_context(silent=True)
    if ctx is not None:
        from zeroplan.cli.outputs import check_outputs
        from zeroplan.scenario.bounds import check_bounds
        from zeroplan.scenario.requires import check_needs

        given = given_options(ctx)
        check_bounds(ctx.params, given)
        check_needs(ctx.params, given)
        check_outputs(ctx.params, given)


def given_options(ctx: typer.Context) -> frozenset[str]:
    """The parameters typed on the command line (or set from the environment), not left at their defaults."""
    # By name: recent typer vendors its own click, whose ParameterSource is not click.core's.
    sources = {name: ctx.get_parameter_source(name) for name in ctx.params}
    return frozenset(name for name, src in sources.items() if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP"))


def scenario_args(values: dict, ctx: typer.Context | None = None):
    """The ScenarioArgs out of a command's locals(), with the options the user gave (known only with ctx,
    which the commands that read a --deepspeed-config pass: options typed there override the file)."""
    from dataclasses import fields

    from zeroplan.scenario import ScenarioArgs

    names = {f.name for f in fields(ScenarioArgs)} - {"given"}
    given = given_options(ctx) if ctx is not None else frozenset()
    return ScenarioArgs(**{k: v for k, v in values.items() if k in names}, given=given)


def mesh_args(options: dict):
    """The MeshArgs out of the parallelism group's options (cli/options.py MESH)."""
    from zeroplan.scenario.parallel import MeshArgs

    return MeshArgs(tp=options["tp"], pp=options["pp"], cp=options["cp"], ep=options["ep"], vpp=options["vpp"],
                    schedule=options["pp_schedule"], cp_comm=options["cp_comm"],
                    pp_first_layers=options["pp_first_layers"], pp_last_layers=options["pp_last_layers"],
                    sequence_parallel=options["sequence_parallel"])


class LazyRender:
    """zeroplan.cli.render, imported on first attribute access: JSON output never loads rich."""

    def __getattr__(self, name: str):
        from zeroplan.cli import render as module

        return getattr(module, name)


render = LazyRender()


def show(data: Callable[[], dict], renderables: Callable[[], list], fmt: Format) -> None:
    """Print machine output (data) or the rich renderables; each is built only when needed."""
    if fmt in (Format.json, Format.yaml):
        emit(data(), fmt)
    elif fmt is Format.markdown:
        from zeroplan.cli.render.markdown import to_markdown

        write_out(to_markdown(data()) + "\n")
    else:
        print_renderables(renderables())


# A cell of numbers and their joiners ("1 x 64", "+3.5 %", "1,368") is one token: never wrapped, never cut.
NUMBER_CELL = r"[\d.,:+%x/*-]+(?: [\d.,:+%x/*-]+)*"
PANEL_TITLE_FRAME = 6  # a panel's corners, rules and spaces around its title
UNBOUNDED_WIDTH = 10_000  # columns: wide enough to measure any table's own minimum


def print_renderables(parts: list) -> None:
    """Rich renderables on stdout; off a terminal without the spaces rich pads lines with (logs, diffs, files).

    No width cuts a number or a name: a table's column is never narrower than its longest word or number (a
    cell of prose wraps between its words), and a table that still does not fit the width leaves out whole
    columns from the right, saying which (`_fit_table`).
    """
    out = console()
    parts = [fitted for part in parts for fitted in _fitted(part, out)]
    if out.is_terminal:
        for part in parts:
            out.print(part)
        return
    with out.capture() as captured:
        for part in parts:
            out.print(part)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def _fitted(part, out) -> list:
    """`part`, with every Table inside it (a Group's items, a Panel's body) fitted to the console's width."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    if isinstance(part, Table):
        return [part, *_fit_table(part, out, out.width)]
    if isinstance(part, Group):
        part.renderables[:] = [fitted for item in part.renderables for fitted in _fitted(item, out)]
    elif isinstance(part, Panel):
        inner = _fitted(part.renderable, out)
        if part.title is not None and Text(str(part.title)).cell_len + PANEL_TITLE_FRAME > out.width:
            inner, part.title = [Text(str(part.title), style="bold"), *inner], None  # rich would crop it: inside
        part.renderable = inner[0] if len(inner) == 1 else Group(*inner)
    return [part]


def _widest_render(table) -> int:
    """An upper bound of the table's width with every cell on one line (text cells only; else unbounded)."""
    from rich.text import Text

    total = len(table.columns) + 1  # the rules between and around the columns
    for column in table.columns:
        texts = [c.plain if isinstance(c, Text) else c for c in (column.header, *column.cells)]
        if not all(isinstance(t, str) for t in texts):
            return UNBOUNDED_WIDTH
        total += max(map(len, texts)) + 2  # rich's default padding: one space each side
    return total


def _one_token(text: str) -> bool:
    import re

    return "\n" not in text and (" " not in text.strip() or re.fullmatch(NUMBER_CELL, text.strip()) is not None)


def _longest_token(text: str) -> int:
    import re

    return max((len(token) for line in text.splitlines() for token in
                ([line] if re.fullmatch(NUMBER_CELL, line.strip()) else line.split())), default=0)


def _fit_table(table, out, width: int) -> list:
    """Each column at least as wide as its longest word or number; whole columns dropped from the right until the
    table fits `width`. Returns the note naming the columns left out (none when all fit)."""
    from rich.measure import Measurement
    from rich.text import Text

    for column in table.columns:
        header, *cells = [c.plain if isinstance(c, Text) else c for c in (column.header, *column.cells)]
        texts = [t for t in (header, *cells) if isinstance(t, str)]
        if cells and all(isinstance(c, str) and _one_token(c) for c in cells):  # numbers and names: kept whole
            column.no_wrap, column.min_width = True, max(map(len, texts))
        else:  # prose wraps between words; a renderable cell (not text) that is wider still folds, never cut
            column.no_wrap, column.overflow = False, "fold"
            column.min_width = max(map(_longest_token, texts), default=None)
    if _widest_render(table) <= width:  # every cell on one line fits: nothing to measure or drop
        return []
    left_out = []
    unbounded = out.options.update_width(UNBOUNDED_WIDTH)  # Measurement.get clamps to the width it is given
    while len(table.columns) > 2 and Measurement.get(out, unbounded, table).minimum > width:
        column = table.columns.pop()
        left_out.insert(0, column.header.plain if isinstance(column.header, Text) else str(column.header))
    if not left_out:
        return []
    return [Text(f"(left out at {width} columns: {', '.join(left_out)}; a wider terminal or -f json shows them)",
                 style="dim")]
