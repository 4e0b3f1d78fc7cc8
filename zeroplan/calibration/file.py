"""A calibration file: what one measured run says about the overheads outside zeroplan's model, per hardware and
stack, as YAML (schema below, docs/calibrate.md), and how an estimate applies it.

    schema: zeroplan-calibration
    version: 1
    hardware: h100-sxm-80gb          # the hardware preset it was measured on; applied to that hardware only
    stack: {torch: 2.13.0}           # free-form: what the run used (versions, engine); said, not checked
    fitted_from: [memory_stats.json] # the records
    allocator: {fraction: 0.061, constant_gib: 0.0}   # reserved - allocated = fraction x allocated + constant
    cuda_context_gib: 0.52           # null: the hardware profile's
    residual_gib: 0.12               # allocated bytes the model missed at the peak, added as a fixed term (>= 0)

The allocator's fraction replaces --fragmentation, the context --cuda-context-gib, unless those are typed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import Field

from zeroplan.errors import SpecError
from zeroplan.frozen import Frozen
from zeroplan.memory.stage import Overheads
from zeroplan.readers import parse_yaml, read_text, require_mapping
from zeroplan.units import GIB
from zeroplan.validate import validated

SCHEMA = "zeroplan-calibration"
VERSION = 1


class Allocator(Frozen):
    fraction: float | None = Field(None, ge=0, le=1, description="reserved - allocated, per allocated byte")
    constant_gib: float = Field(0.0, ge=0, le=1024, description="reserved - allocated beyond the fraction, GiB")


class CalibrationFile(Frozen):
    """The YAML, validated: unknown keys and out-of-range values are one line each."""

    schema_: Literal["zeroplan-calibration"] = Field(alias="schema")
    version: Literal[1]
    hardware: str = Field(min_length=1, max_length=200)
    stack: dict[str, str] = Field(default_factory=dict, max_length=64)
    fitted_from: list[str] = Field(default_factory=list, max_length=64)
    allocator: Allocator = Field(default_factory=Allocator)
    cuda_context_gib: float | None = Field(None, ge=0, le=1024)
    residual_gib: float = Field(0.0, ge=0, le=1024)


@dataclass(frozen=True, slots=True)
class Calibration:
    """A calibration in bytes; None: the hardware profile's value stays."""

    hardware: str
    allocator_fraction: float | None = None
    allocator_constant_bytes: int = 0
    cuda_context_bytes: int | None = None
    residual_bytes: int = 0
    stack: tuple[tuple[str, str], ...] = ()
    fitted_from: tuple[str, ...] = ()
    origin: str = ""


def load_calibration(path: str | Path) -> Calibration:
    origin = str(path)
    data = require_mapping(parse_yaml(read_text(Path(path)), origin), origin)
    found = validated(CalibrationFile, data, origin)
    return Calibration(
        hardware=found.hardware, allocator_fraction=found.allocator.fraction,
        allocator_constant_bytes=round(found.allocator.constant_gib * GIB),
        cuda_context_bytes=None if found.cuda_context_gib is None else round(found.cuda_context_gib * GIB),
        residual_bytes=round(found.residual_gib * GIB), stack=tuple(sorted(found.stack.items())),
        fitted_from=tuple(found.fitted_from), origin=origin)


def calibration_data(cal: Calibration) -> dict:
    """The YAML's content (round-trips through load_calibration, to the byte at 9 decimals of GiB)."""
    return {
        "schema": SCHEMA, "version": VERSION, "hardware": cal.hardware, "stack": dict(cal.stack),
        "fitted_from": list(cal.fitted_from),
        "allocator": {"fraction": None if cal.allocator_fraction is None else round(cal.allocator_fraction, 6),
                      "constant_gib": round(cal.allocator_constant_bytes / GIB, 9)},
        "cuda_context_gib": None if cal.cuda_context_bytes is None else round(cal.cuda_context_bytes / GIB, 9),
        "residual_gib": round(cal.residual_bytes / GIB, 9),
    }


def calibration_yaml(cal: Calibration) -> str:
    """The file's text (cli/files.py writes it: the one writer)."""
    import yaml

    return "# zeroplan calibration (docs/calibrate.md)\n" + yaml.safe_dump(calibration_data(cal), sort_keys=False)


def calibrated(overheads: Overheads, cal: Calibration, hardware: str, typed: frozenset[str]) -> Overheads:
    """`overheads` with the calibration's values, except those typed as options (fragmentation, cuda_context_gib);
    a calibration measured on other hardware is refused."""
    if cal.hardware != hardware:
        raise SpecError(f"{cal.origin}: a calibration for hardware {cal.hardware}; this run's is {hardware}")
    changes, values = [], {}
    if cal.allocator_fraction is not None and "fragmentation" not in typed:
        values["fragmentation_fraction"] = cal.allocator_fraction
        changes.append(f"fragmentation {overheads.fragmentation_fraction:.1%} -> {cal.allocator_fraction:.1%}")
    if cal.cuda_context_bytes is not None and "cuda_context_gib" not in typed:
        values["cuda_context_bytes"] = cal.cuda_context_bytes
        changes.append(f"CUDA context {overheads.cuda_context_bytes / GIB:.2f} -> {cal.cuda_context_bytes / GIB:.2f} GiB")
    if cal.allocator_constant_bytes:
        values["allocator_constant_bytes"] = cal.allocator_constant_bytes
        changes.append(f"+ allocator constant {cal.allocator_constant_bytes / GIB:.2f} GiB")
    if cal.residual_bytes:
        values["residual_bytes"] = cal.residual_bytes
        changes.append(f"+ residual {cal.residual_bytes / GIB:.2f} GiB")
    return replace(overheads, **values, calibration=cal.origin, calibration_changes=tuple(changes) or ("nothing",))
