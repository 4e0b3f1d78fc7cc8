"""Inline SVG charts for the HTML report (cli/render/html.py): stacked bars per stage and the step's timeline.

Pure strings: no rich, no typer, nothing fetched. Every number drawn is read from a JSON document the CLI
emits (docs/json.md); this module only scales it to pixels. Text goes through html.escape.
"""

from __future__ import annotations

from html import escape
from typing import NamedTuple

# (gpu_bytes key, label, colour): the terminal's BAR_PARTS order and hues (cli/render/__init__.py).
PARTS = (
    ("parameters", "parameters", "#2a9bb5"),
    ("gradients", "gradients", "#b45cc2"),
    ("optimizer_states", "optimizer states", "#d9a520"),
    ("activations", "activations", "#4ca35a"),
    ("buffers", "buffers", "#3f5fb5"),
    ("overhead", "overhead", "#c9483e"),
)
WIDTH = 760  # px of every chart
LABEL_W, VALUE_W = 120, 100  # the narrowest label column left of a bar, the value right of it
CHAR_W = 7.6  # px per character of 12 px text, to fit the longest label
BAR_H, BAR_GAP = 22, 10


class Bar(NamedTuple):
    label: str
    parts: dict[str, int]  # gpu_bytes keys -> bytes; keys missing from it draw nothing
    total: int
    usable: int | None = None  # the device's usable bytes: a dashed line across the bar


class Point(NamedTuple):
    label: str  # where in the step ("forward of layer 3", "optimizer step")
    phase: str  # start, forward, backward, step: the band it is drawn in
    bytes: int  # the most alive at any moment inside the event
    parts: dict[str, int] | None = None  # the same bytes by category (TIMELINE_PARTS keys), stacked when given


def amount(num_bytes: float, scale: int, label: str) -> str:
    return f"{num_bytes / scale:,.2f} {label}"


BREAK_RATIO = 2.5  # a bar this many times the next largest (or usable) is drawn broken: the rest stay readable
BREAK_AT = 0.88  # of the bar area: where a broken bar's break is drawn


def axis_top(bars: list[Bar]) -> tuple[int, bool]:
    """The bytes the full bar area stands for, and whether the largest bar is broken to keep the others readable."""
    totals = sorted(b.total for b in bars)
    usable = max((b.usable or 0 for b in bars), default=0)
    rest = max(totals[-2] if len(totals) > 1 else 0, usable)
    if rest and totals[-1] > BREAK_RATIO * rest:
        return int(rest * 1.15 / BREAK_AT), True
    return max(totals[-1], usable) or 1, False


def stacked_bars(bars: list[Bar], scale: int, unit: str) -> str:
    """One horizontal bar per row on one axis, a segment per part, the usable memory as a dashed line; a bar
    that dwarfs the rest is broken (its segments cut at the break, its true total printed after it)."""
    if not bars:
        return ""
    label_w = int(min(max(LABEL_W, CHAR_W * max(len(b.label) for b in bars) + 12), WIDTH // 2))
    area = WIDTH - label_w - VALUE_W
    widest, broken = axis_top(bars)
    height = len(bars) * (BAR_H + BAR_GAP) + 48
    out = [_svg_open(height, "memory per GPU, stacked by term")]
    for i, bar in enumerate(bars):
        y = i * (BAR_H + BAR_GAP) + 4
        out.append(f'<text x="{label_w - 8}" y="{y + BAR_H * 0.7:.1f}" text-anchor="end">{escape(bar.label)}</text>')
        x = float(label_w)
        # px per byte: the axis's; a bar past the axis (broken) is drawn whole up to just past its break instead
        per_byte = area / widest if bar.total <= widest else area * (BREAK_AT + 0.06) / bar.total
        for key, name, colour in PARTS:
            size = bar.parts.get(key, 0)
            if size <= 0:
                continue
            w = max(size * per_byte, 1.0)  # a term that is there is never invisible
            out.append(f'<rect class="seg" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{BAR_H}" fill="{colour}">'
                       f"<title>{escape(name)}: {amount(size, scale, unit)}</title></rect>")
            x += w
        if not any(bar.parts.get(k, 0) > 0 for k, _, _ in PARTS) and bar.total > 0:  # a total without its terms
            w = bar.total * per_byte
            out.append(f'<rect class="seg" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{BAR_H}" fill="#7a8794">'
                       f"<title>peak: {amount(bar.total, scale, unit)}</title></rect>")
            x += w
        if broken and bar.total > widest:  # the break: two white slants across the bar
            bx = label_w + area * BREAK_AT
            out.append(f'<path class="brk" d="M{bx - 4:.1f},{y + BAR_H + 2} L{bx + 2:.1f},{y - 2} '
                       f'M{bx + 4:.1f},{y + BAR_H + 2} L{bx + 10:.1f},{y - 2}"><title>axis broken</title></path>')
        out.append(f'<text x="{x + 6:.2f}" y="{y + BAR_H * 0.7:.1f}">{amount(bar.total, scale, unit)}</text>')
        if bar.usable:
            ux = label_w + bar.usable / widest * area
            out.append(f'<line class="usable" x1="{ux:.2f}" x2="{ux:.2f}" y1="{y - 3}" y2="{y + BAR_H + 3}">'
                       f"<title>usable: {amount(bar.usable, scale, unit)}</title></line>")
    out.append(_axis(label_w, area, len(bars) * (BAR_H + BAR_GAP) + 2, widest, broken, scale, unit))
    out.append(_legend(height - 18, [(name, colour) for key, name, colour in PARTS
                                     if any(b.parts.get(key, 0) > 0 for b in bars)], usable=any(b.usable for b in bars),
                       left=8))
    out.append("</svg>")
    return "\n".join(out)


PHASE_FILL = {"start": "#f4f4f4", "forward": "#eef5fb", "backward": "#f6eefa", "step": "#fdf0ee"}
# The timeline's categories (docs/json.md, stages[].timeline.categories), bottom to top.
TIMELINE_PARTS = (*((k, n, c) for k, n, c in PARTS if k not in ("activations", "overhead")),
                  ("activations", "activations", "#4ca35a"), ("temporaries", "temporaries", "#8d6e63"))
CHART_H, PAD_L, PAD_B, PAD_T = 250, 70, 40, 48


def timeline_chart(points: list[Point], peak: int, scale: int, unit: str, usable: int | None = None,
                   usable_label: str = "usable", top: int = 0) -> str:
    """Bytes alive after each event of one step as a filled line, the phases as bands, the peak circled and
    named; `peak` is the index of the peak event in `points` (the document's own, never recomputed). `top`:
    the y axis's top, the same for every stage of a page (at least this chart's own peak and usable)."""
    if not points:
        return ""
    plot_w, plot_h = WIDTH - PAD_L - 20, CHART_H - PAD_T - PAD_B
    top = max([p.bytes for p in points] + [usable or 0, top]) or 1
    n = len(points)

    def x(i: int) -> float:
        return PAD_L + (i + 0.5) * plot_w / n

    def y(v: int) -> float:
        return PAD_T + plot_h - v / top * plot_h

    out = [_svg_open(CHART_H, "bytes alive through the step")]
    start = 0
    for i in range(1, n + 1):  # one band per run of events in the same phase
        if i == n or points[i].phase != points[start].phase:
            left, right = PAD_L + start * plot_w / n, PAD_L + i * plot_w / n
            out.append(f'<rect class="band" x="{left:.2f}" y="{PAD_T}" width="{right - left:.2f}" height="{plot_h}" '
                       f'fill="{PHASE_FILL.get(points[start].phase, "#f2f2f2")}"/>')
            out.append(f'<text class="phase" x="{(left + right) / 2:.2f}" y="{CHART_H - 10}" text-anchor="middle">'
                       f"{escape(points[start].phase)}</text>")
            start = i
    base = PAD_T + plot_h
    below = [0] * n
    drawn = []
    for key, name, colour in TIMELINE_PARTS:  # stacked areas, each over the ones below it
        above = [b + (p.parts or {}).get(key, 0) for b, p in zip(below, points, strict=True)]
        if above != below:
            upper = " ".join(f"{x(i):.2f},{y(v):.2f}" for i, v in enumerate(above))
            lower = " ".join(f"{x(i):.2f},{y(v):.2f}" for i, v in reversed(list(enumerate(below))))
            out.append(f'<polygon class="layer" points="{upper} {lower}" fill="{colour}" fill-opacity="0.75">'
                       f"<title>{escape(name)}</title></polygon>")
            drawn.append((name, colour))
        below = above
    line = " ".join(f"{x(i):.2f},{y(p.bytes):.2f}" for i, p in enumerate(points))
    if not drawn:
        out.append(f'<polygon class="area" points="{x(0):.2f},{base} {line} {x(n - 1):.2f},{base}"/>')
    out.append(f'<polyline class="line" points="{line}"/>')
    for tick in (0, top / 2, top):
        out.append(f'<text class="tick" x="{PAD_L - 6}" y="{y(tick) + 4:.2f}" text-anchor="end">{tick / scale:,.1f}</text>')
    out.append(f'<text class="tick" x="{PAD_L - 6}" y="{PAD_T - 14}" text-anchor="end">{escape(unit)}</text>')
    if usable:
        out.append(f'<line class="usable" x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{y(usable):.2f}" y2="{y(usable):.2f}">'
                   f"<title>{escape(usable_label)}: {amount(usable, scale, unit)}</title></line>")
    p = points[peak]
    px, py = x(peak), y(p.bytes)
    anchor = "end" if px > PAD_L + plot_w * 0.6 else "start"
    shift = -10 if anchor == "end" else 10
    out.append(f'<circle class="peak" cx="{px:.2f}" cy="{py:.2f}" r="5"><title>peak</title></circle>')
    out.append(f'<text class="peak-label" x="{px + shift:.2f}" y="{max(py - 8, 14):.2f}" text-anchor="{anchor}">'
               f"peak {amount(p.bytes, scale, unit)}: {escape(p.label)}</text>")
    if drawn:
        out.append(_legend(6, drawn, usable=bool(usable), left=PAD_L))
    out.append("</svg>")
    return "\n".join(out)


def _axis(left: int, area: int, y: int, top: int, broken: bool, scale: int, unit: str) -> str:
    """The shared axis under the bars: ticks at 0, a quarter ... of what the area stands for (up to a break)."""
    stop = BREAK_AT if broken else 1.0
    out = [f'<line x1="{left}" x2="{left + area * stop:.1f}" y1="{y}" y2="{y}" stroke="#8a949c"/>']
    step = round_step(top * stop / scale)
    for k in range(int(top * stop / scale / step) + 1):
        tx = left + area * k * step * scale / top
        out.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{y}" y2="{y + 4}" stroke="#8a949c"/>'
                   f'<text class="tick" x="{tx:.1f}" y="{y + 15}" text-anchor="middle">{k * step:,g}</text>')
    out.append(f'<text class="tick" x="{left + area * stop + 22:.1f}" y="{y + 15}">{escape(unit)}'
               + (" (axis broken)" if broken else "") + "</text>")
    return "".join(out)


def round_step(span: float, ticks: int = 4) -> float:
    """A round tick step (1, 2 or 5 x 10^k) giving about `ticks` steps over `span`."""
    import math

    raw = span / ticks if span > 0 else 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)


def _svg_open(height: int, title: str) -> str:
    return (f'<svg role="img" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}"><title>{escape(title)}</title>')


def _legend(y: int, items: list[tuple[str, str]], usable: bool, left: int = LABEL_W) -> str:
    out, x = [], float(left)
    for name, colour in items:
        out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{colour}"/>'
                   f'<text x="{x + 16}" y="{y + 10}">{escape(name)}</text>')
        x += 24 + CHAR_W * len(name)
    if usable:
        out.append(f'<line class="usable" x1="{x}" x2="{x}" y1="{y - 1}" y2="{y + 13}"/><text x="{x + 6}" y="{y + 10}">usable</text>')
    return "".join(out)
