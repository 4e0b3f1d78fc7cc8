"""`zeroplan sweep`: every configuration of a grid over one scenario, as a summary table, CSV or JSON.

Registered on the app by cli/app.py; option groups in cli/options.py (cli/groups.py), the error boundary in cli/common.py.
"""

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Annotated

import typer

from zeroplan.cli.common import render, run, scenario_args, show, write_out
from zeroplan.cli.groups import OUTPUT_PANEL, takes
from zeroplan.cli.options import FINETUNE, HARDWARE, MODEL, OUTPUT, TRAINING, Format
from zeroplan.errors import ZeroplanError
from zeroplan.memory.setup import Checkpointing, OffloadDevice, ZeroStage
from zeroplan.scenario import ScenarioArgs, scenario
from zeroplan.units import parse_count

if TYPE_CHECKING:
    from zeroplan.memory.grid import GridAxes, GridResult


def _grid_args(values: dict):
    from dataclasses import fields

    return GridArgs(**{f.name: values[f.name] for f in fields(GridArgs)})


class GridFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


GRID_PANEL = "Grid"
AxisOpt = Annotated[str, typer.Option(rich_help_panel=GRID_PANEL, help="Comma list of values and inclusive ranges A-B or A-B:STEP.")]


# The grid's axes replace --gpus/--nodes/--micro-batch, and its --checkpointing and --offload-* take comma lists.
@takes(MODEL, HARDWARE.without("gpus", "nodes"),
       TRAINING.without("fp32_grad_accum", "micro_batch", "grad_accum", "checkpointing", "loss"), FINETUNE,
       OUTPUT.without("html", "force"))
def sweep(
    stages: Annotated[str, typer.Option(rich_help_panel=GRID_PANEL, help="ZeRO stages, e.g. 0,1,2,3 or 2-3.")] = "0,1,2,3",
    gpu_counts: Annotated[str, typer.Option(rich_help_panel=GRID_PANEL, help="GPU counts (values, A-B, A-B:STEP), on the fewest nodes of the hardware's size.")] = "1,2,4,8,16,32,64",
    micro_batches: AxisOpt = "1-16",
    checkpointings: Annotated[str, typer.Option("--checkpointing", rich_help_panel=GRID_PANEL, help="Comma list of none, selective, selective-op, full.")] = "none,selective,full",
    offload_optimizers: Annotated[str, typer.Option("--offload-optimizer", rich_help_panel=GRID_PANEL, help="Comma list of none, cpu, nvme.")] = "none,cpu,nvme",
    offload_params: Annotated[str, typer.Option("--offload-param", rich_help_panel=GRID_PANEL, help="Comma list of none, cpu, nvme.")] = "none,cpu,nvme",
    fmt: Annotated[GridFormat, typer.Option("--format", "-f", rich_help_panel=OUTPUT_PANEL, help="table: the cheapest fitting config per stage; csv, json: every row.")] = GridFormat.table,
    **options,
) -> None:
    """Every configuration of a grid (stages x GPU counts x micro-batches x checkpointing x offload): per-GPU peak and fit.

    The fine-tuning options (docs/finetune.md) hold for every configuration; stages the fine-tune's base cannot run
    at (QLoRA under ZeRO-3 without --quant-storage of the compute dtype) are left out, with the reason."""
    args, grid, units = scenario_args(options), _grid_args(locals()), options["units"]

    def go() -> None:
        from zeroplan.cli import views

        if fmt is GridFormat.table:
            result = sweep_grid_of(args, grid)
            show(lambda: {}, lambda: render.grid_summary(result, units), Format.table)
            return
        result = sweep_grid_of(args, grid, stream=True)  # every row, written as it is made: constant memory
        for line in views.grid_csv(result.rows) if fmt is GridFormat.csv else views.grid_json(result):
            write_out(line)

    run(go, fmt)


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


MAX_GRID = 1_000_000  # configurations: about 10 s of one core, streamed (a longer grid runs for minutes)


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


def grid_axes(grid: GridArgs) -> "GridAxes":
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


def sweep_grid_of(args: ScenarioArgs, grid: GridArgs, *, stream: bool = False) -> "GridResult":
    """Every configuration of the grid over one scenario (memory/grid.py); with `stream`, the rows as an iterator."""
    from zeroplan.memory.grid import stream_axes, sweep_axes

    return (stream_axes if stream else sweep_axes)(scenario(args), grid_axes(grid))
