"""CI rules over the memory estimate of the stage the DeepSpeed config runs: fit, headroom, buffer sizes.

Each takes that stage's StageEstimate (memory/stage.py, via estimate.evaluate) as the evidence "memory".
Pure: no I/O. Sizes in messages are GiB (2^30 B), as everywhere on screen.
"""

from __future__ import annotations

from collections.abc import Iterator

from zeroplan.check.findings import Finding, Rule, RunContext
from zeroplan.deepspeed.reader import DeepSpeedConfig
from zeroplan.memory.buffers import HPZ_TERM
from zeroplan.memory.capacity import HEADROOM_FRACTION
from zeroplan.memory.stage import StageEstimate
from zeroplan.memory.terms import Phase
from zeroplan.memory.verdict import breaking_words, stage_verdict
from zeroplan.units import Unit, format_bytes

# Warn when a plan fits with less than this share of the GPU free: memory.capacity.HEADROOM_FRACTION, the
# advisor's default headroom too, so a plan `zeroplan advise` recommends never fails `check --strict`.
LOW_HEADROOM_PCT = HEADROOM_FRACTION * 100


def _gib(num_bytes: int) -> str:
    return format_bytes(num_bytes, Unit.gib)


def _on(run: RunContext) -> str:
    return f" on {run.hardware.name}" if run.hardware else ""


def check_fits(config: DeepSpeedConfig, run: RunContext, *, memory: StageEstimate) -> Iterator[Finding]:
    if memory.fits is not False:
        return
    verdict = stage_verdict(memory)  # the term that breaks the fit, not the largest (memory/verdict.py)
    yield Finding(rule="does-not-fit", severity="error", key="zero_optimization.stage", message=(
        f"does not fit at ZeRO-{int(memory.stage)}: peak {_gib(memory.total)} per GPU at {verdict.moment} "
        f"> usable {_gib(memory.usable_bytes)}{_on(run)}, {_gib(-memory.headroom_bytes)} over; "
        f"{breaking_words(verdict)}"))  # fmt: skip


def check_headroom(config: DeepSpeedConfig, run: RunContext, *, memory: StageEstimate) -> Iterator[Finding]:
    if not memory.fits:
        return
    pct = LOW_HEADROOM_PCT if run.min_headroom_pct is None else run.min_headroom_pct
    free, usable = memory.headroom_bytes, memory.usable_bytes
    if free * 100 >= usable * pct:
        return
    yield Finding(rule="low-headroom", severity="warning", key="zero_optimization.stage", message=(
        f"fits at ZeRO-{int(memory.stage)} with only {_gib(free)} free ({free / usable:.1%} of {_gib(usable)}{_on(run)}), "
        f"under the {pct:g}% headroom threshold: peak {_gib(memory.total)} per GPU; allocator spikes or a longer "
        "batch can tip it over"))  # fmt: skip


def buffers_alive(est: StageEstimate, shrunk: frozenset[str] = frozenset()) -> int:
    """The most buffer bytes alive at once, leaving out hpZ (a deliberate ZeRO++ memory-for-bandwidth trade).

    With `shrunk`, as if each of those knobs were at its floor: their terms lose the part the knob sets.
    """
    by_phase = dict.fromkeys(Phase, 0)
    for term in est.buffers:
        if term.name != HPZ_TERM:
            by_phase[term.phase] += term.bytes - (term.knob_bytes if term.knob in shrunk else 0)
    return by_phase[Phase.always] + max(by_phase[Phase.backward], by_phase[Phase.step])


# What to set a knob to, said once per knob. The Hugging Face "auto" values are transformers' (deepspeed/auto.py).
KNOB_ADVICE = {
    "reduce_bucket_size": 'e.g. hidden_size^2 elements (what Hugging Face\'s "auto" fills)',
    "stage3_prefetch_bucket_size": 'e.g. 0.9 x hidden_size^2 elements (what Hugging Face\'s "auto" fills)',
    "stage3_max_live_parameters": "lower it towards the largest layer, which stays gathered whatever it says",
    "stage3_param_persistence_threshold": 'e.g. 10 x hidden_size (what Hugging Face\'s "auto" fills)',
    "sub_group_size": "lower it (0 makes every parameter its own sub-group)",
}


def actionable_knobs(config: DeepSpeedConfig) -> frozenset[str]:
    """The knobs the user sets by editing a number: given as one, or left at DeepSpeed's default.

    A knob given as "auto" is left to Hugging Face, which sizes it from the model; zeroplan's value for it
    is an assumption, so it is never what a finding blames.
    """
    autos = {auto.key for auto in config.autos}
    return frozenset(field for field in KNOB_ADVICE
                     if f"zero_optimization.{config.knob_keys.get(field)}" not in autos)  # fmt: skip


def _knob_value(config: DeepSpeedConfig, field: str, value: int) -> str:
    key = config.knob_keys.get(field)
    if key is None:
        return f"{field} {value:,} (DeepSpeed's default; the config does not set it)"
    return f"zero_optimization.{key} {value:,} (as the config gives it)"


def check_buffers(config: DeepSpeedConfig, run: RunContext, *, memory: StageEstimate) -> Iterator[Finding]:
    """Buffers beyond the model states, when a knob the user can change is what makes them so."""
    alive, states = buffers_alive(memory), memory.states.total
    knobs = actionable_knobs(config)
    if alive <= states or buffers_alive(memory, knobs) > states:
        return  # no excess, or the model's own tensors (the gathered largest layer, ...) make it: nothing to set
    blamed = [t for t in memory.buffers if t.knob in knobs and t.knob_bytes > 0 and t.name != HPZ_TERM]
    term = max(blamed, key=lambda t: t.knob_bytes)
    value = _knob_value(config, term.knob, getattr(memory.base.knobs, term.knob))
    others = sorted({t.knob for t in blamed} - {term.knob})
    also = f"; also {', '.join(others)}" if others else ""
    yield Finding(rule="buffers-exceed-states", severity="warning",
                  key=f"zero_optimization.{config.knob_keys.get(term.knob, term.knob)}", message=(
        f"DeepSpeed's buffers ({_gib(alive)} at once) exceed the model states ({_gib(states)}) per GPU at "
        f"ZeRO-{int(memory.stage)} because of {value}: it sizes the {term.name} ({_gib(term.bytes)}); "
        f"{KNOB_ADVICE[term.knob]}{also}"))  # fmt: skip


_MEMORY = "zeroplan/memory/stage.py estimate_stage (docs/formulas.md)"
MEMORY_RULES = (
    Rule("does-not-fit", "error", "peak memory per GPU at the configured stage exceeds the usable capacity",
         _MEMORY, check_fits, needs=("memory",)),
    Rule("low-headroom", "warning", f"fits, with less free than the headroom threshold ({LOW_HEADROOM_PCT:g}% of capacity)",
         f"{_MEMORY}; docs/hardware.md (fragmentation)", check_headroom, needs=("memory",)),
    Rule("buffers-exceed-states", "warning", "DeepSpeed's buffers exceed the model states because of a knob the config "
         "sets (or leaves at DeepSpeed's default): buckets, prefetch, live parameters, sub-groups",
         "deepspeed/runtime/zero/stage_1_and_2.py, stage3.py buffers; DeepSpeed issues #1302, #4305",
         check_buffers, needs=("memory",)),
)  # fmt: skip
