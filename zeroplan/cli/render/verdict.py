"""The verdict lines that lead estimate, advise and check: fits or not, headroom, the term that breaks the fit."""

from __future__ import annotations

from rich.text import Text

from zeroplan.memory.verdict import Verdict, breaking_words
from zeroplan.units import Unit, format_bytes


def verdict_text(label: str, v: Verdict, unit: Unit) -> Text:
    """One line: 'ZeRO-3: does not fit: 81.59 GiB of 79.65 GiB usable, 1.94 GiB over at optimizer step; ...'."""
    peak, usable = format_bytes(v.peak_bytes, unit), format_bytes(v.usable_bytes, unit)
    at = f" at {v.moment}" if v.moment else ""
    if v.fits:
        return Text.assemble(f"{label}: ", ("fits", "bold green"),
                             f": {peak} of {usable} usable, {format_bytes(v.headroom_bytes, unit)} free "
                             f"({100 * v.headroom_fraction:.1f} %)" + (f", peak{at}" if at else ""))
    over = f": {peak} of {usable} usable, {format_bytes(-v.headroom_bytes, unit)} over{at}"
    return Text.assemble(f"{label}: ", ("does not fit", "bold red"),
                         over + (f"; {breaking_words(v, unit)}" if v.breaking else ""))
