"""What `zeroplan sweep` does between parsing and printing: the grid's axes from their text, then the grid.

Raises ZeroplanError for bad input; never prints or exits (cli/sweep.py does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zeroplan.errors import ZeroplanError
from zeroplan.memory.setup import Checkpointing, OffloadDevice, ZeroStage
from zeroplan.scenario import ScenarioArgs, scenario
from zeroplan.units import parse_count

if TYPE_CHECKING:
    from zeroplan.memory.grid import GridAxes, GridResult


@dataclass(frozen=True)
class GridArgs:
    """The grid axes as typed: comma lists of values, inclusive ranges A-B and A-B:STEP (numbers), or names."""

    stages: str = "0,1,2,3"
    gpu_counts: str = "1,2,4,8,16,32,64"
    micro_batches: str = "1-16"
    checkpointings: str = "none,selective,full"
    offload_optimizers: str = "none,cpu,nvme"
    offload_params: str = "none,cpu,nvme"


MAX_AXIS_VALUES = 100_000  # one range longer than this is a typo
MAX_GRID = 5_000_000  # configurations; about 30 s and several GB of rows


def parse_axis(text: str, what: str, parse: Callable[[str, str], int] = parse_count) -> tuple[int, ...]:
    """Sorted distinct integers from '1,2,4-8,16-64:16': values, inclusive ranges A-B and stepped ranges A-B:S."""
    values: set[int] = set()
    for item in text.split(","):
        span, colon, step_text = item.strip().partition(":")
        lo, dash, hi = span.partition("-")
        first = parse(lo, what)
        last = parse(hi, what) if dash else first
        step = parse_count(step_text, what + " step") if colon else 1
        if last < first or (last - first) // step >= MAX_AXIS_VALUES:
            raise ZeroplanError(f"{what} range {item.strip()!r} must run upwards over at most {MAX_AXIS_VALUES:,} values")
        values.update(range(first, last + 1, step))
    return tuple(sorted(values))


def _stage(text: str, what: str) -> int:
    if text.strip() not in {"0", "1", "2", "3"}:
        raise ZeroplanError(f"{what} {text.strip()!r} is not a ZeRO stage (0, 1, 2 or 3)")
    return int(text)


def parse_choices(text: str, enum: type, what: str) -> tuple:
    """Distinct enum members from 'none,cpu', in the enum's order."""
    names = {item.strip() for item in text.split(",")}
    unknown = sorted(names - {m.value for m in enum})
    if unknown:
        raise ZeroplanError(f"{what} {unknown[0]!r} is not one of {', '.join(m.value for m in enum)}")
    return tuple(m for m in enum if m.value in names)


def grid_axes(grid: GridArgs) -> GridAxes:
    from zeroplan.memory.grid import GridAxes

    axes = GridAxes(
        stages=tuple(ZeroStage(s) for s in parse_axis(grid.stages, "--stages", _stage)),
        gpu_counts=parse_axis(grid.gpu_counts, "--gpu-counts"),
        micro_batches=parse_axis(grid.micro_batches, "--micro-batches"),
        checkpointings=parse_choices(grid.checkpointings, Checkpointing, "--checkpointing"),
        offload_optimizers=parse_choices(grid.offload_optimizers, OffloadDevice, "--offload-optimizer"),
        offload_params=parse_choices(grid.offload_params, OffloadDevice, "--offload-param"),
    )
    if axes.size > MAX_GRID:
        raise ZeroplanError(f"the grid has {axes.size:,} configurations, more than {MAX_GRID:,}: narrow an axis")
    return axes


def sweep(args: ScenarioArgs, grid: GridArgs) -> GridResult:
    from zeroplan.memory.grid import sweep_axes

    """Every configuration of the grid over one scenario (zeroplan.grid)."""
    return sweep_axes(scenario(args), grid_axes(grid))
