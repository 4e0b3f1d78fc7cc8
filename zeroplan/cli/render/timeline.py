"""The step's timeline under the estimate table: one line of block characters per stage, the peak marked.

Drawn from the stages' "timeline" documents (docs/json.md, memory/view.py's timeline_view), the same data
--format json prints and --html charts; no arithmetic beyond scaling and binning.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from zeroplan.units import Unit, format_bytes

BLOCKS = " ▁▂▃▄▅▆▇█"
COLUMNS = 48  # at most this many columns: deeper models bin consecutive events, each bin its largest
PHASE_STYLE = {"start": "dim", "forward": "cyan", "backward": "magenta", "step": "yellow"}


def bins(totals: list[int], columns: int = COLUMNS) -> list[range]:
    """Consecutive, non-empty index ranges covering `totals`, at most `columns` of them."""
    n = len(totals)
    cols = min(n, columns)
    return [range(i * n // cols, (i + 1) * n // cols) for i in range(cols)]


def timeline_chart(rows: list[tuple[str, dict | None, int]], unit: Unit, usable: int | None = None) -> Group | None:
    """`rows`: (stage label, its timeline document or None, its overhead bytes). One scale for every line: 0 to the
    largest event with its stage's overhead (or `usable`, if larger), so stages compare by height; a column over
    the usable memory is marked x under it, the peak's column ^ with its bytes, its moment and the overhead."""
    rows = [r for r in rows if r[1] and r[1].get("events")]
    if not rows:
        return None
    width = max(len(label) for label, _, _ in rows) + 1
    top = max([max(e["total"] for e in tl["events"]) + overhead for _, tl, overhead in rows] + [usable or 0])
    line = f", usable {format_bytes(usable, unit)} (x under a column over it)" if usable else ""
    lines = [Text(f"the step event by event, forward then backward then the optimizer step, on one scale: a full "
                  f"block is {format_bytes(top, unit)}, overhead included{line}:", style="dim")]
    for label, tl, overhead in rows:
        lines += _stage_lines(label, tl, overhead, width, top, usable, unit)
    return Group(*lines)


def _stage_lines(label: str, tl: dict, overhead: int, width: int, top: int, usable: int | None, unit: Unit) -> list:
    events = tl["events"]
    bar, marks = Text(f"{label:<{width}}"), [" "] * width
    for span in bins([e["total"] for e in events]):
        best = max(span, key=lambda i: events[i]["total"])
        value = events[best]["total"] + overhead
        bar.append(BLOCKS[max(1, round(value / top * (len(BLOCKS) - 1)))],
                   style=PHASE_STYLE.get(events[best]["phase"], ""))
        marks.append("^" if tl["peak_index"] in span else "x" if usable and value > usable else " ")
    low = min(e["total"] for e in events) + overhead
    bar.append(f" {format_bytes(low, unit)} to {format_bytes(tl['peak_bytes'] + overhead, unit)}", style="dim")
    return [bar, Text("".join(marks).rstrip() + " ", style="bold red")
            + Text(f"{format_bytes(tl['peak_bytes'], unit)} at {tl['peak_moment']}, "
                   f"+ {format_bytes(overhead, unit)} overhead")]
