"""`zeroplan sweep`: every configuration of a grid over one scenario, as a summary table, CSV or JSON.

Registered on the app by cli/app.py; option aliases in cli/options.py, the error boundary in cli/common.py.
"""

import sys
from enum import Enum
from typing import Annotated

import typer

from zeroplan.cli.common import render, run, scenario_args, show
from zeroplan.cli.options import (
    SETUP,
    AttentionOpt,
    Format,
    HardwareOpt,
    LargestOpt,
    ModelOpt,
    OptimizerOpt,
    ParamsOpt,
    PrecisionOpt,
    SeqLenOpt,
    UnitsOpt,
)
from zeroplan.hardware.presets import DEFAULT_HARDWARE
from zeroplan.units import Unit


def _grid_args(values: dict):
    from dataclasses import fields

    from zeroplan.cli.sweeping import GridArgs

    return GridArgs(**{f.name: values[f.name] for f in fields(GridArgs)})


class GridFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


AxisOpt = Annotated[str, typer.Option(help="Comma list of values and inclusive ranges A-B or A-B:STEP.")]


def sweep(
    model: ModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    precision: PrecisionOpt = SETUP.precision,
    optimizer: OptimizerOpt = SETUP.optimizer,
    seq_len: SeqLenOpt = str(SETUP.seq_len),
    attention: AttentionOpt = SETUP.attention,
    stages: Annotated[str, typer.Option(help="ZeRO stages, e.g. 0,1,2,3 or 2-3.")] = "0,1,2,3",
    gpu_counts: Annotated[str, typer.Option(help="GPU counts (values, A-B, A-B:STEP), on the fewest nodes of the hardware's size.")] = "1,2,4,8,16,32,64",
    micro_batches: AxisOpt = "1-16",
    checkpointings: Annotated[str, typer.Option("--checkpointing", help="Comma list of none, selective, full.")] = "none,selective,full",
    offload_optimizers: Annotated[str, typer.Option("--offload-optimizer", help="Comma list of none, cpu, nvme.")] = "none,cpu,nvme",
    offload_params: Annotated[str, typer.Option("--offload-param", help="Comma list of none, cpu, nvme.")] = "none,cpu,nvme",
    units: UnitsOpt = Unit.gib,
    fmt: Annotated[GridFormat, typer.Option("--format", "-f", help="table: the cheapest fitting config per stage; csv, json: every row.")] = GridFormat.table,
) -> None:
    """Every configuration of a grid (stages x GPU counts x micro-batches x checkpointing x offload): per-GPU peak and fit."""
    args, grid = scenario_args(locals()), _grid_args(locals())

    def go() -> None:
        from zeroplan.cli import sweeping as commands_sweep
        from zeroplan.cli import views

        result = commands_sweep.sweep(args, grid)
        if fmt is GridFormat.csv:
            sys.stdout.write(views.grid_csv(result.rows))
        else:
            show(lambda: views.grid_view(result), lambda: render.grid_summary(result, units), Format(fmt.value))

    run(go)
