"""A framework file over a command line: the options it sets where none was typed, and the assumptions it adds.

Options typed on the command line override the file, as they override a --deepspeed-config (ScenarioArgs.given).
A key the file states counts as given, so it also overrides a DeepSpeed config's own value; a tool's default for
an absent key only fills what the DeepSpeed config leaves open. scenario.py applies the result to ScenarioArgs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import KIND_NAMES, TOOL_NAMES
from zeroplan.frameworks.merge import choose, merged
from zeroplan.printable import printable
from zeroplan.frameworks.run import FrameworkRun, Taken, shown
from zeroplan.frameworks.source import find_deepspeed_config

# An option -> the command-line options that override it.
OVERRIDES = {"model": ("model", "params"), "stage": ("stage", "engine"), "deepspeed_config": ("deepspeed_config",),
             # a typed fine-tuning option, or a typed peft adapter_config.json, replaces the file's adapter
             **{o: (o, "adapter_config") for o in ("lora_rank", "lora_dropout", "dora", "modules_to_save")},
             "lora_targets": ("lora_targets", "adapter_config"),
             "lora_linear_names": ("lora_targets", "adapter_config"),
             "lora_target_rule": ("lora_targets", "adapter_config"),
             "train_only": ("freeze", "lora_rank", "adapter_config")}


@dataclass(frozen=True)
class FromFile:
    """A --from file applied: the ScenarioArgs updates, the assumptions, and the DeepSpeed config and stage it gives."""

    run: FrameworkRun
    updates: Mapping[str, Any]  # ScenarioArgs field -> value
    stated: frozenset[str]  # the updates the file states (a tool's default is not among them)
    notes: tuple[str, ...]
    deepspeed: Mapping | None = None  # an inline DeepSpeed config (a path is in updates["deepspeed_config"])
    deepspeed_origin: str = ""
    stage: int | None = None  # the FSDP or DDP strategy's ZeRO stage
    model_key: str | None = None  # the key that named the model, when it was used


def apply_run(run: FrameworkRun, given: frozenset[str], fields: frozenset[str]) -> FromFile:
    """What `run` sets of `fields` (ScenarioArgs's) that `given` leaves open, and every key it took, in words."""
    return apply_runs((run,), given, fields)


def apply_runs(runs: tuple[FrameworkRun, ...], given: frozenset[str], fields: frozenset[str]) -> FromFile:
    """Several files of one run (`--from train.yaml --from accelerate.yaml`): each option from the file that decides
    it (frameworks/merge.py), the others' keys said to be overridden; then as apply_run."""
    chosen = choose(runs)
    run = merged(runs, chosen)
    notes: list[str] = []
    updates: dict[str, Any] = {}
    stated: set[str] = set()
    found: dict[str, Any] = {"deepspeed": None, "deepspeed_origin": "", "stage": None, "model_key": None}
    for one in runs:
        label = Path(one.origin).name
        notes.append(f"{KIND_NAMES[one.kind]} {one.origin} ({label} below): its keys listed here set the run; options "
                     "given on the command line override them")  # fmt: skip
        for taken in one.taken:
            winner = chosen.get(taken.option) if taken.option else None
            over = next((o for o in OVERRIDES.get(taken.option or "", (taken.option,)) if o in given), None)
            where, said = "", _said(one, taken)
            if winner is not None and winner[1] is not taken:
                notes.append(f"{label}: {said} -> {taken.means} (overridden by {Path(winner[0].origin).name}: {winner[1].key})")
                continue
            effective = winner[1] if winner is not None else taken
            if taken.option is not None and over is None:
                where = _apply(one, effective, updates, stated, found, fields)
            notes.append(f"{label}: {said} -> {effective.means}{where}"
                         + (f" (overridden by --{over.replace('_', '-')})" if over else ""))  # fmt: skip
        notes += _unused_notes(one, label)
        if one.uncounted:
            notes.append(f"{label}: memory savings not modelled, the estimate counts without them (an upper bound): "
                         + "; ".join(one.uncounted))  # fmt: skip
    return FromFile(run, updates, frozenset(stated), tuple(notes), **found)


def _unused_notes(run: FrameworkRun, label: str) -> list[str]:
    harmless, unknown = run.unused
    notes = []
    if harmless:
        notes.append(f"{label}: keys not used, no effect on the step's memory (data, schedule, logging, saving, "
                     f"evaluation): {', '.join(printable(k) for k in harmless)}")  # fmt: skip
    if unknown:
        notes.append(f"{label}: keys zeroplan does not know, not used (assumed to change no memory; if one does, "
                     f"the estimate is without it): {', '.join(printable(k) for k in unknown)}")  # fmt: skip
    return notes


def _apply(run: FrameworkRun, taken: Taken, updates: dict, stated: set, found: dict, fields: frozenset[str]) -> str:
    """Record one taken key; returns where a DeepSpeed path was found, in words."""
    if taken.value is None and taken.option in ("model", "seq_len"):  # a value the file leaves to the command line
        raise SpecError(f"{run.origin}: {taken.key}: {taken.means}")
    if taken.option == "stage":
        found["stage"] = taken.value
    elif taken.option == "deepspeed_config" and isinstance(taken.value, Mapping):
        found["deepspeed"], found["deepspeed_origin"] = taken.value, f"{run.origin}: {taken.key}"
    elif taken.option == "deepspeed_config":
        path, how = find_deepspeed_config(taken.value, run.origin, taken.key)
        updates["deepspeed_config"] = str(path)
        return f" {path} ({how})"
    elif taken.option in fields:
        updates[taken.option] = taken.value
        if not taken.default:
            stated.add(taken.option)
        if taken.option == "model":
            found["model_key"] = taken.key
    return ""


def _said(run: FrameworkRun, taken: Taken) -> str:
    if not taken.default:
        return f"{taken.key}: {shown(taken.written)}"
    default = "" if taken.written is None else f", {TOOL_NAMES[run.kind]}'s default {shown(taken.written)}"
    return f"{taken.key} not set{default}"
