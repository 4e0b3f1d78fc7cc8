"""Rich Tables whose columns fit: widths set from the text (no measuring), drawn line by line.

Rich renders every table cell through Padding, render_lines and Text wrapping (~0.1 ms a cell here,
~15 ms of an estimate's start for its three tables). When pin_widths has fixed every column
at its widest cell, the table needs none of that: each row is one line, each cell its text justified
in its column. `Pinned` draws exactly those lines, with the characters and per-character styles rich
would give them, and hands the table to rich whenever a feature it does not draw is in play (a box
substituted for ASCII, row separators, footers, multi-line cells, row styles that alternate...).
tests/test_render.py compares both, character and style, for every table the CLI prints.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text


def pin_widths(part: object, max_width: int) -> object:
    """Give a Table that fits in `max_width` the column widths rich would measure, so it skips measuring.

    Rich measures every cell of a table before it renders it (about half of the tables' render time,
    ~10 ms of a start here). When the widest cell of each column, plus padding and borders, fits the
    console, rich's layout is exactly those widths; they are computed here from the cells' text and
    set on the columns and the table is drawn by `Pinned`. Anything else (a table that must wrap, a
    cell that is not text, a column with its own width rules) is left to rich. tests/test_render.py
    checks the output is unchanged.
    """
    if not isinstance(part, Table) or part.expand or part.show_footer:
        return part
    widths = []
    for column in part.columns:
        if column.width is not None or column.min_width or column.max_width or column.ratio:
            return part
        texts = ([column.header] if part.show_header else []) + list(column.cells)
        if not all(isinstance(t, (str, Text)) for t in texts):
            return part
        lines = [line for t in texts for line in (t.plain if isinstance(t, Text) else t).splitlines()]
        widths.append(max(map(cell_len, lines), default=0))
    try:
        padding = sum(part._get_padding_width(i) for i in range(len(part.columns)))
        borders = part._extra_width
    except AttributeError:  # another rich: let it measure
        return part
    if sum(widths) + padding + borders > max_width:
        return part
    for column, width in zip(part.columns, widths):
        column.width = width
    return Pinned(part)


class Pinned:
    """`table` (its column widths pinned), drawn without rich's per-cell layout when it can be."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = self.table
        try:  # rich's own width rules; with pinned columns it measures nothing, it applies min_width and the like
            extra = table._extra_width
            widths = table._calculate_column_widths(console, options.update_width(options.max_width - extra))
        except AttributeError:  # a rich without these: it draws the table itself
            yield table
            return
        if not _drawable(table, console, options, sum(widths) + extra):
            yield table
            return
        get_style = console.get_style
        if table.title:
            title = console.render_str(table.title, style=Style.pick_first(table.title_style, "table.title"),
                                       highlight=False)  # fmt: skip
            width = sum(widths) + extra
            yield from console.render(title, options.update(width=width, highlight=table.highlight, height=None)
                                      .update(justify=table.title_justify))  # fmt: skip
        box, edge, border = table.box, table.show_edge, get_style(table.style or "") + get_style(table.border_style or "")
        new_line = Segment.line()
        if edge:
            yield Segment(box.get_top(widths), border)
            yield new_line
        header_style = get_style(table.header_style or "")
        column_styles = [get_style(column.style or "") for column in table.columns]
        rows = [(Style.null(), [header_style + get_style(c.header_style) for c in table.columns],
                 [c.header for c in table.columns], (box.head_left, box.head_right, box.head_vertical))]  # fmt: skip
        cells = [list(column.cells) for column in table.columns]
        for index in range(len(table.rows)):
            last = index == len(table.rows) - 1
            sides = (box.foot_left, box.foot_right, box.foot_vertical) if last else (box.mid_left, box.mid_right, box.mid_vertical)
            rows.append((get_style(table.get_row_style(console, index)), column_styles, [c[index] for c in cells], sides))
        for number, (row_style, styles, texts, (left, right, vertical)) in enumerate(rows):
            if edge:
                yield Segment(left, border)
            for i, (text, style, column, width) in enumerate(zip(texts, styles, table.columns, widths)):
                yield from _cell(console, text, style + row_style, width - 2, column.justify)
                if i < len(texts) - 1:
                    yield Segment(vertical, border)
            if edge:
                yield Segment(right, border)
            yield new_line
            if number == 0:
                yield Segment(box.get_row(widths, "head", edge=edge), border)
                yield new_line
        if edge:
            yield Segment(box.get_bottom(widths), border)
            yield new_line


def _cell(console: Console, text: str | Text, base: Style, width: int, justify: str) -> tuple[Segment, ...]:
    """One padded cell as rich draws it: a space, the text justified in `width` (one segment: rich pads
    the line's Text, whose style spans it), a space; the cell's and row's style under the text's own."""
    plain, style = (text, base) if isinstance(text, str) else (text.plain, base + console.get_style(text.style))
    gap = " " * (width - cell_len(plain))
    return Segment(" ", base), Segment(gap + plain if justify == "right" else plain + gap, style), Segment(" ", base)


def _drawable(table: Table, console: Console, options: ConsoleOptions, width: int) -> bool:
    """Whether `table` has only what Pinned draws, and fits."""
    safe = table.safe_box if table.safe_box is not None else console.safe_box
    box = table.box
    if box is None or box.substitute(options, safe=safe) is not box:
        return False
    if not (box.head_vertical.strip() and box.mid_vertical.strip() and box.foot_vertical.strip()):
        return False  # whitespace dividers take the row's background in rich
    if (not table.show_header or table.show_footer or table.show_lines or table.leading or table.row_styles
            or table.caption or table.expand or table.padding != (0, 1, 0, 1) or not table.pad_edge
            or table.collapse_padding or width > options.max_width or table.width is not None):  # fmt: skip
        return False
    for column in table.columns:
        if column.width is None or column.justify not in ("left", "right") or column.highlight:
            return False
        for cell in (column.header, *column.cells):
            if not isinstance(cell, (str, Text)) or "\n" in (cell if isinstance(cell, str) else cell.plain):
                return False
            if isinstance(cell, Text) and (cell.spans or cell.justify or cell.end != "\n"):
                return False
    return not any(row.end_section for row in table.rows)
