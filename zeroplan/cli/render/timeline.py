"""The step's timeline under the estimate table: one line of block characters per stage, the peak marked.

Drawn from the stages' "timeline" documents (docs/json.md, memory/view.py's timeline_view), the same data
--format json prints and --html charts; no arithmetic beyond scaling and binning.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from zeroplan.units import Unit, format_bytes

BLOCKS = " ▁▂▃▄▅▆▇█"
COLUMNS = 60  # at most this many columns: deeper models bin consecutive events, each bin its largest
PHASE_STYLE = {"start": "dim", "forward": "cyan", "backward": "magenta", "step": "yellow"}


def bins(totals: list[int], columns: int = COLUMNS) -> list[range]:
    """Consecutive, non-empty index ranges covering `totals`, at most `columns` of them."""
    n = len(totals)
    cols = min(n, columns)
    return [range(i * n // cols, (i + 1) * n // cols) for i in range(cols)]


def timeline_chart(rows: list[tuple[str, dict, int]], unit: Unit) -> Group | None:
    """`rows`: (stage label, its timeline document, its overhead bytes). One scale for all stages, so their
    heights compare; the peak's column is marked ^ with the moment and the bytes it holds."""
    rows = [r for r in rows if r[1] and r[1].get("events")]
    if not rows:
        return None
    top = max(e["total"] for _, tl, _ in rows for e in tl["events"]) or 1
    width = max(len(label) for label, _, _ in rows) + 1
    lines = [Text("through the step: bytes alive at each event's high-water mark, overhead aside "
                  "(cyan forward, magenta backward, yellow optimizer step)", style="dim")]
    for label, tl, overhead in rows:
        events = tl["events"]
        spans = bins([e["total"] for e in events])
        bar = Text(f"{label:<{width}}")
        mark = 0
        for col, span in enumerate(spans):
            best = max(span, key=lambda i: events[i]["total"])
            level = round(events[best]["total"] / top * (len(BLOCKS) - 1))
            bar.append(BLOCKS[max(level, 1)], style=PHASE_STYLE.get(events[best]["phase"], ""))
            if tl["peak_index"] in span:
                mark = col
        lines.append(bar)
        lines.append(Text(" " * (width + mark) + "^ ", style="bold red")
                     + Text(f"peak {format_bytes(tl['peak_bytes'], unit)} at {tl['peak_moment']} "
                            f"(+ {format_bytes(overhead, unit)} overhead)"))
    return Group(*lines)
