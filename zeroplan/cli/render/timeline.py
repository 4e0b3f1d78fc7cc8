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


def timeline_chart(rows: list[tuple[str, dict | None, int]], unit: Unit) -> Group | None:
    """`rows`: (stage label, its timeline document or None, its overhead bytes). Each stage's line spans its own
    least to most bytes (printed beside it), so where the step peaks shows at any size; the peak's column is
    marked ^ with its bytes, its moment and the overhead the stage's peak adds."""
    rows = [r for r in rows if r[1] and r[1].get("events")]
    if not rows:
        return None
    width = max(len(label) for label, _, _ in rows) + 1
    lines = [Text("the step event by event (high-water marks, overhead aside; cyan forward, magenta backward, "
                  "yellow step):", style="dim")]
    for label, tl, overhead in rows:
        events = tl["events"]
        low, high = min(e["total"] for e in events), max(e["total"] for e in events)
        bar = Text(f"{label:<{width}}")
        mark = 0
        for col, span in enumerate(bins([e["total"] for e in events])):
            best = max(span, key=lambda i: events[i]["total"])
            share = (events[best]["total"] - low) / (high - low) if high > low else 1.0
            bar.append(BLOCKS[1 + round(share * (len(BLOCKS) - 2))], style=PHASE_STYLE.get(events[best]["phase"], ""))
            if tl["peak_index"] in span:
                mark = col
        bar.append(f" {format_bytes(low, unit)} to {format_bytes(high, unit)}", style="dim")
        lines.append(bar)
        lines.append(Text(" " * (width + mark) + "^ ", style="bold red")
                     + Text(f"{format_bytes(tl['peak_bytes'], unit)} at {tl['peak_moment']}, "
                            f"+ {format_bytes(overhead, unit)} overhead"))
    return Group(*lines)
