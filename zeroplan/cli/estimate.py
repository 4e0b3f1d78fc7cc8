"""`zeroplan estimate`: per-GPU memory under each ZeRO stage."""

from typing import Annotated

import typer

from zeroplan.cli.common import mesh_args, print_warning, render, run, scenario_args, show
from zeroplan.cli.groups import takes
from zeroplan.cli.options import (
    CALIBRATION,
    DEEPSPEED,
    ENGINE,
    BLOCK_SETTINGS,
    ENGINE_SETTINGS,
    FINETUNE,
    HARDWARE,
    INPUTS,
    MESH,
    MODEL,
    OFFLOAD,
    OUTPUT,
    PROFILE,
    TRAINING,
    Method,
)
from zeroplan.errors import UsageError
from zeroplan.models.mesh import CpComm
from zeroplan.units import Unit

METHOD_PANEL = "Method"


# The run's description, as calibrate takes it too (cli/calibrate.py): everything but how estimate prints.
RUN = (MODEL, INPUTS, HARDWARE, PROFILE, CALIBRATION, TRAINING, BLOCK_SETTINGS, FINETUNE, ENGINE, ENGINE_SETTINGS, OFFLOAD, DEEPSPEED,
       MESH)


@takes(*RUN, OUTPUT)
def estimate(
    ctx: typer.Context,
    method: Annotated[Method, typer.Option(rich_help_panel=METHOD_PANEL, help="zeroplan's model, or DeepSpeed's estimator functions or Megatron-LM's theoretical memory formula, to the byte.")] = Method.zeroplan,
    buffer_factor: Annotated[float, typer.Option(rich_help_panel=METHOD_PANEL, help="DeepSpeed's additional_buffer_factor (--method deepspeed).")] = 1.5,
    **options,
) -> None:
    """Per-GPU memory under each ZeRO stage (a --deepspeed-config's or --from file's stage): model states, buffers, activations, overhead."""
    args = scenario_args(options, ctx)
    stage, units, fmt, html, force = (options[k] for k in ("stage", "units", "fmt", "html", "force"))

    def go() -> None:
        from zeroplan.cli import views
        from zeroplan.cli.files import html_target, write_report
        from zeroplan.scenario import answers

        if html is not None and method is not Method.zeroplan:
            raise UsageError(f"--html draws zeroplan's estimate; --method {method.value} prints its own tables only")
        report = html_target(html, force)
        mesh = mesh_args(options)
        if args.compile and (method is not Method.zeroplan or mesh.given):
            raise UsageError("--compile: modelled for zeroplan's own estimate on data parallelism only (measured on "
                             "one whole block), not with --method deepspeed|megatron or --tp/--pp/--cp/--ep")
        if args.float8.value != "none" and (method is not Method.zeroplan or mesh.given):
            raise UsageError("--float8: modelled for zeroplan's own estimate on data parallelism only, not with "
                             "--method deepspeed|megatron or --tp/--pp/--cp/--ep")
        if method is Method.megatron and mesh.cp_comm is not CpComm.p2p:
            raise UsageError("--cp-comm a2a (DeepSpeed-Ulysses) is zeroplan's own model; Megatron-LM's theoretical "
                             "memory formula has no context-parallel communication kind")
        if method is Method.megatron:
            from zeroplan.megatron.view import megatron_view
            from zeroplan.scenario.megatron import megatron_estimate

            found = megatron_estimate(args, mesh, stage)
            show(lambda: megatron_view(found), lambda: _megatron_tables(found, units), fmt)
            return
        if mesh.given and method is Method.deepspeed:
            raise UsageError(f"{', '.join(mesh.given)}: DeepSpeed's estimator functions know data parallelism only")
        if method is Method.deepspeed:
            result = answers.deepspeed_estimate(args, buffer_factor)
            show(lambda: views.deepspeed_view(result), lambda: render.deepspeed_tables(result), fmt)
        else:
            from zeroplan.memory.view import estimate_view

            if mesh.given:
                from zeroplan.scenario.mesh import mesh_estimate

                result = mesh_estimate(args, mesh, stage)
            else:
                result = answers.estimate(args, stage)
            for warning in result.warnings:
                print_warning(warning)
            if report is not None:  # the file first: a closed stdout cannot lose it
                from zeroplan.cli.files import command_line
                from zeroplan.cli.render.html import estimate_report

                write_report(report, estimate_report(estimate_view(result, units), command_line("estimate")), force)
            show(lambda: estimate_view(result, units), lambda: render.estimate_renderables(result, units), fmt)

    run(go, fmt)


def _megatron_tables(found, units: Unit) -> list:
    from zeroplan.cli.render.megatron import megatron_tables

    return megatron_tables(found, units)
