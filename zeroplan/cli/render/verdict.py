"""The verdict lines that lead estimate, advise and check: fits or not, headroom, the term that breaks the fit."""

from __future__ import annotations

from rich.text import Text

from zeroplan.memory.verdict import Verdict, verdict_words
from zeroplan.units import Unit


def verdict_text(label: str, v: Verdict, unit: Unit) -> Text:
    """One line: 'ZeRO-3: does not fit: 81.59 GiB of 79.65 GiB usable, 1.94 GiB over at optimizer step; ...'."""
    word, rest = verdict_words(v, unit).split(":", 1)
    return Text.assemble(f"{label}: ", (word, "bold green" if v.fits else "bold red"), ":" + rest)


def stage_lines(est, label, unit: Unit) -> list[Text]:
    """One verdict line per stage of an Estimate (`label(stage)` names it), ahead of everything else; none without
    hardware."""
    from zeroplan.memory.verdict import stage_verdict

    return [verdict_text(label(s), v, unit) for s in est.stages if (v := stage_verdict(s)) is not None]
