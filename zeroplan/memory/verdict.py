"""The verdict on one stage: does its peak fit the GPU, by how much, and which term at the peak moment breaks the fit.

The term that breaks the fit is the one that makes the difference, not the largest: the lines alive at the peak
moment are stacked, what is alive all step first (model states, the always-alive buffers, the overhead), then
the moment's own (activations, the phase's buffers, the optimizer step's temporaries). When the first part
alone exceeds the usable memory, the largest of it breaks the fit (no schedule of the step can help). Otherwise
the breaking term is the smallest of the moment's own lines that is at least the excess: without it, that
moment would fit (FSDP2's AdamW foreach temporary at the optimizer step, not the optimizer states). When no
single line is that large, the largest of them is named. docs/formulas.md, "The verdict".
"""

from dataclasses import dataclass

from zeroplan.memory.stage import StageEstimate
from zeroplan.memory.terms import Phase, Term
from zeroplan.units import Unit, format_bytes


@dataclass(frozen=True, slots=True)
class Verdict:
    """Fit, headroom and the breaking term of one stage; bytes."""

    fits: bool
    peak_bytes: int
    usable_bytes: int
    moment: str  # the timeline event of the peak: 'end of forward', 'optimizer step'
    breaking: str | None = None  # the term that breaks the fit; None when it fits
    breaking_bytes: int = 0
    persistent: bool = False  # the breaking term is alive all step (model states alone do not fit)

    @property
    def headroom_bytes(self) -> int:
        """Usable minus peak: negative when the peak is over."""
        return self.usable_bytes - self.peak_bytes

    @property
    def headroom_fraction(self) -> float:
        return self.headroom_bytes / self.usable_bytes if self.usable_bytes else 0.0


def stage_verdict(s: StageEstimate) -> Verdict | None:
    """The stage's verdict; None without hardware (no usable memory to fit)."""
    if s.usable_bytes is None:
        return None
    moment = s.peak_moment
    if s.fits:
        return Verdict(True, s.total, s.usable_bytes, moment)
    always, own = peak_lines(s)
    over = s.total - s.usable_bytes
    if sum(size for _, size in always) > s.usable_bytes or not own:
        name, size = max(always, key=_size)
        return Verdict(False, s.total, s.usable_bytes, moment, name, size, persistent=True)
    enough = [line for line in own if line[1] >= over]
    name, size = min(enough, key=_size) if enough else max(own, key=_size)
    return Verdict(False, s.total, s.usable_bytes, moment, name, size)


def peak_lines(s: StageEstimate) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The lines alive at the peak moment as (name, bytes): (alive all step, the moment's own); they sum to the total."""
    lines = s.at_peak()
    always = [("parameters", lines["parameters"]), ("gradients", lines["gradients"]),
              ("optimizer states", lines["optimizer_states"])]
    kept = [t for t in s.buffers if t.phase is Phase.always]
    kept_bytes = sum(t.bytes for t in kept)
    always += [(t.name, t.bytes) for t in kept] if kept_bytes <= lines["buffers"] else []
    moment_buffers = lines["buffers"] - (kept_bytes if kept_bytes <= lines["buffers"] else 0)
    always += [(t.name, t.bytes) for t in s.overhead] if s.overhead else [("overhead", s.overhead_bytes)]
    own = [("activations", lines["activations"])]
    own += _named(moment_buffers, [t for t in s.buffers if t.phase is Phase.backward], "engine buffers")
    own += _named(lines["temporaries"], [t for t in s.buffers if t.phase is Phase.step], "optimizer-step temporaries")
    return [t for t in always if t[1] > 0], [t for t in own if t[1] > 0]


def _size(line: tuple[str, int]) -> int:
    return line[1]


def _named(total: int, terms: list[Term], fallback: str) -> list[tuple[str, int]]:
    """`total` as the named terms when they sum to it exactly, else one line under `fallback`."""
    if total and sum(t.bytes for t in terms) == total:
        return [(t.name, t.bytes) for t in terms]
    return [(fallback, total)]


def verdict_words(v: Verdict, unit: Unit = Unit.gib) -> str:
    """'fits: 77.05 GiB of 79.65 GiB usable, 2.60 GiB free (3.3 %), peak at end of forward' or 'does not fit: ...'."""
    peak, usable = format_bytes(v.peak_bytes, unit), format_bytes(v.usable_bytes, unit)
    at = f" at {v.moment}" if v.moment else ""
    if v.fits:
        return (f"fits: {peak} of {usable} usable, {format_bytes(v.headroom_bytes, unit)} free "
                f"({100 * v.headroom_fraction:.1f} %)" + (f", peak{at}" if at else ""))
    over = f"does not fit: {peak} of {usable} usable, {format_bytes(-v.headroom_bytes, unit)} over{at}"
    return over + (f"; {breaking_words(v, unit)}" if v.breaking else "")


def breaking_words(v: Verdict, unit: Unit = Unit.gib) -> str:
    """What breaks the fit, in words: 'breaks it: AdamW foreach temporary 15.26 GiB (without it that moment fits)'."""
    size = format_bytes(v.breaking_bytes, unit)
    if v.persistent:
        return f"what is alive all step already exceeds it, the largest: {v.breaking} {size}"
    if v.breaking_bytes >= -v.headroom_bytes:
        return f"breaks it: {v.breaking} {size} (without it that moment fits)"
    return f"no single line closes the gap; the largest at that moment: {v.breaking} {size}"
