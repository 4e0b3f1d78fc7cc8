"""`zeroplan calibrate RECORD...`: a real run's memory record against zeroplan's estimate of the same run.

The run is described as `estimate` takes it (the same option groups, cli/estimate.py RUN: --deepspeed-config,
--from, the mesh...) or by a `check` plan file (--plan); estimate's output choices (--method, --buffer-factor,
--html) are left out.
"""

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from zeroplan.cli.common import mesh_args, run, scenario_args, show
from zeroplan.cli.estimate import RUN
from zeroplan.cli.groups import takes
from zeroplan.cli.options import OUTPUT
from zeroplan.units import Unit

RecordsArg = Annotated[list[Path], typer.Argument(
    metavar="RECORD", show_default=False,
    help="The run's memory records (docs/calibrate.md): torch.cuda.memory_stats() JSON, a _dump_snapshot pickle, "
         "trainer_state.json or a Trainer log, DeepSpeed / torchtitan logs, Lightning's metrics.csv, nvidia-smi CSV.")]
PANEL = "Calibration"
SaveOpt = Annotated[Optional[str], typer.Option("--save", rich_help_panel=PANEL, help="Write the fitted calibration (YAML) for --calibration; an existing file only with --force.")]
PlanOpt = Annotated[Optional[str], typer.Option("--plan", rich_help_panel=PANEL, help="A `zeroplan check` plan file describing the run, instead of the options.")]


@takes(*RUN, OUTPUT.without("html"))
def calibrate(ctx: typer.Context, records: RecordsArg, save: SaveOpt = None, plan: PlanOpt = None, **options) -> None:
    """Predicted against measured, term by term, from a real run's memory record; --save fits a calibration."""
    fmt, units = options["fmt"], options["units"]
    args = scenario_args(options, ctx)

    def go() -> None:
        from zeroplan.calibration.file import calibration_yaml
        from zeroplan.calibration.result import calibrate as compare_run
        from zeroplan.calibration.result import result_view
        from zeroplan.cli.files import write_new_file

        if plan is not None:
            _alone_with_plan(ctx)
        target = _save_target(save, options["force"])  # before any work
        result = compare_run(_estimate(args, options, plan), records)
        if target is not None:
            write_new_file(target, calibration_yaml(result.calibration), force=options["force"])
        show(lambda: result_view(result, save), lambda: _tables(result_view(result, save), units), fmt)

    run(go, fmt)


def _save_target(save: str | None, force: bool) -> Path | None:
    """The --save path; an existing one without --force is a usage error (exit 2), a non-regular one refused."""
    from zeroplan.cli.files import check_target
    from zeroplan.errors import UsageError

    if save is None:
        return None
    if not save.strip():
        raise UsageError("--save needs a file name")
    target = Path(save)
    if os.path.lexists(target) and not force:
        raise UsageError(f"{target}: already exists; pass --force to overwrite it")
    check_target(target, force)
    return target


def _alone_with_plan(ctx: typer.Context) -> None:
    """--plan describes the whole run: an option of the run typed beside it would be dropped, so it is refused."""
    from zeroplan.cli.common import given_options
    from zeroplan.errors import UsageError

    typed = sorted(given_options(ctx) - {"records", "save", "plan", "fmt", "units", "force"})
    if typed:
        names = ", ".join("--" + name.replace("_", "-") for name in typed)
        raise UsageError(f"--plan describes the run (its calibration: key included); drop {names}")


def _estimate(args, options: dict, plan: str | None):
    """The estimate of the run: the plan's, or the options' as `estimate` computes it (the mesh's when given)."""
    if plan is not None:
        from zeroplan.check.planfiles import load_plan
        from zeroplan.memory.estimate import estimate_memory
        from zeroplan.memory.setup import ZeroStage

        planned = load_plan(Path(plan))
        return estimate_memory(planned.scenario, stages=(ZeroStage(int(planned.config.stage)),))
    mesh = mesh_args(options)
    if mesh.given:
        from zeroplan.scenario.mesh import mesh_estimate

        return mesh_estimate(args, mesh, options["stage"])
    from zeroplan.scenario import answers

    return answers.estimate(args, options["stage"])


def _tables(view: dict, units: Unit) -> list:
    from zeroplan.cli.render.calibrate import calibrate_renderables

    return calibrate_renderables(view, units)
