"""The typer app: parse -> load -> compute -> render. The only module that prints or exits."""

from __future__ import annotations

import os
from enum import Enum
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from pydantic import ValidationError

from zeroplan.cli_options import (  # the option types the signatures below name
    DEFAULT_HARDWARE, AttentionOpt, CheckFormat, CheckpointingOpt, DsConfigOpt, Format, FormatOpt, Fp32AccumOpt, FragOpt,
    GibOpt, GpusOpt, GradAccumOpt, HardwareOpt, KnobOpt, LargestOpt, Method, MicroBatchOpt, ModelOpt, NodesOpt, OffloadOptOpt,
    OffloadParamOpt, EngineOpt, OptimizerOpt, OverlapOpt, ParamsOpt, PrecisionOpt, SeqLenOpt, StageOpt, UnitsOpt,
)  # fmt: skip
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.spec import Attention, Checkpointing, Engine, OffloadDevice, Optimizer, Precision, parse_count  # noqa: F401 - importable here too
from zeroplan.units import Unit

APP_SETTINGS = dict(
    add_completion=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app = typer.Typer(
    name="zeroplan",
    help="Plan DeepSpeed ZeRO training runs: per-GPU memory per stage, throughput, advice, CI checks.",
    no_args_is_help=True,
    **APP_SETTINGS,
)

PIPE_WIDTH = 110  # console width when stdout is not a terminal


def _console(stderr: bool = False):
    from rich.console import Console

    tty = (sys.stderr if stderr else sys.stdout).isatty()
    no_color = bool(os.environ.get("NO_COLOR")) or not tty
    # Off a terminal rich assumes 80 columns; the stage tables need more to stay readable in logs.
    width = None if tty else PIPE_WIDTH
    return Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=False, width=width)


def _emit(data: dict, fmt: Format) -> None:
    """Machine output on stdout, nothing else."""
    if fmt is Format.json:
        import json

        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif fmt is Format.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


def run(fn):
    """The one error boundary: ZeroplanError / ValidationError -> one red line on stderr, exit 1 (UsageError: 2)."""
    try:
        return fn()
    except ZeroplanError as exc:
        _console(stderr=True).print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(2 if isinstance(exc, UsageError) else 1) from None
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            _console(stderr=True).print(f"[red]error:[/red] {where + ': ' if where else ''}{msg}", soft_wrap=True)
        raise typer.Exit(1) from None


def _given(ctx: typer.Context) -> frozenset[str]:
    """The parameters typed on the command line (or set from the environment), not left at their defaults."""
    # By name: recent typer vendors its own click, whose ParameterSource is not click.core's.
    sources = {name: ctx.get_parameter_source(name) for name in ctx.params}
    return frozenset(name for name, src in sources.items() if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP"))


def _scenario_args(values: dict, ctx: typer.Context | None = None):
    """The ScenarioArgs out of a command's locals(), with the options the user gave (known only with ctx,
    which the commands that read a --deepspeed-config pass: options typed there override the file)."""
    from dataclasses import fields

    from zeroplan.commands import ScenarioArgs

    names = {f.name for f in fields(ScenarioArgs)} - {"given"}
    given = _given(ctx) if ctx is not None else frozenset()
    return ScenarioArgs(**{k: v for k, v in values.items() if k in names}, given=given)


def _grid_args(values: dict):
    from dataclasses import fields

    from zeroplan.commands import GridArgs

    return GridArgs(**{f.name: values[f.name] for f in fields(GridArgs)})


@app.command()
def estimate(
    ctx: typer.Context,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    gpus: GpusOpt = "8",
    nodes: NodesOpt = "1",
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    stage: StageOpt = None,
    precision: PrecisionOpt = Precision.bf16_mixed,
    optimizer: OptimizerOpt = Optimizer.adamw,
    fp32_grad_accum: Fp32AccumOpt = False,
    seq_len: SeqLenOpt = "2048",
    micro_batch: MicroBatchOpt = "1",
    grad_accum: GradAccumOpt = "1",
    checkpointing: CheckpointingOpt = Checkpointing.none,
    attention: AttentionOpt = Attention.flash,
    offload_optimizer: OffloadOptOpt = OffloadDevice.none,
    offload_param: OffloadParamOpt = OffloadDevice.none,
    reduce_bucket_size: KnobOpt = None,
    overlap_comm: OverlapOpt = None,
    prefetch_bucket_size: KnobOpt = None,
    max_live_parameters: KnobOpt = None,
    param_persistence_threshold: KnobOpt = None,
    sub_group_size: KnobOpt = None,
    hpz_partition_size: KnobOpt = None,
    cuda_context_gib: GibOpt = None,
    nccl_gib: GibOpt = None,
    fragmentation: FragOpt = None,
    deepspeed_config: DsConfigOpt = None,
    engine: EngineOpt = Engine.deepspeed,
    method: Annotated[Method, typer.Option(help="zeroplan's model, or DeepSpeed's own estimator functions to the byte.")] = Method.zeroplan,
    buffer_factor: Annotated[float, typer.Option(help="DeepSpeed's additional_buffer_factor (--method deepspeed).")] = 1.5,
    units: UnitsOpt = Unit.gib,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per-GPU memory under each ZeRO stage (a --deepspeed-config's stage): model states, buffers, activations, overhead."""
    args = _scenario_args(locals(), ctx)

    def go() -> None:
        from zeroplan import commands, views

        if method is Method.deepspeed:
            result = commands.deepspeed_estimate(args, buffer_factor)
            _show(lambda: views.deepspeed_view(result), lambda: render.deepspeed_tables(result), fmt)
        else:
            result = commands.estimate(args, stage)
            _show(lambda: views.estimate_view(result, units), lambda: render.estimate_renderables(result, units), fmt)

    run(go)


@app.command()
def capacity(
    ctx: typer.Context,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    gpus: GpusOpt = "8",
    nodes: NodesOpt = "1",
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    precision: PrecisionOpt = Precision.bf16_mixed,
    optimizer: OptimizerOpt = Optimizer.adamw,
    seq_len: SeqLenOpt = "2048",
    micro_batch: MicroBatchOpt = "1",
    checkpointing: CheckpointingOpt = Checkpointing.none,
    attention: AttentionOpt = Attention.flash,
    offload_optimizer: OffloadOptOpt = OffloadDevice.none,
    offload_param: OffloadParamOpt = OffloadDevice.none,
    units: UnitsOpt = Unit.gib,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per stage: the largest micro-batch that fits, the fewest GPUs, and the largest model (scaled in depth)."""
    args = _scenario_args(locals(), ctx)

    def go() -> None:
        from zeroplan import commands

        result = commands.capacity(args)
        _show(lambda: result, lambda: render.capacity_renderables(result, units), fmt)

    run(go)


@app.command()
def check(
    ctx: typer.Context,
    plans: Annotated[Optional[list[str]], typer.Argument(help="Plan YAML files or globs (quoted globs are expanded too).", show_default=False)] = None,
    ignore: Annotated[Optional[list[str]], typer.Option("--ignore", help="Skip this rule id (repeatable), on top of each plan's ignore list.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 on warnings too.")] = False,
    fmt: Annotated[CheckFormat, typer.Option("--format", "-f", help="text, json, GitHub Actions annotations or JUnit XML.")] = CheckFormat.text,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the json, github or junit report to this file instead of stdout.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Let --output replace an existing file.")] = False,
    deepspeed_config: Annotated[Optional[str], typer.Option("--deepspeed-config", help="Check this DeepSpeed config, on the run the options below describe, instead of plans.")] = None,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    gpus: GpusOpt = "8",
    nodes: NodesOpt = "1",
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    precision: PrecisionOpt = Precision.bf16_mixed,
    optimizer: OptimizerOpt = Optimizer.adamw,
    seq_len: SeqLenOpt = "2048",
    micro_batch: MicroBatchOpt = "1",
    grad_accum: GradAccumOpt = "1",
    checkpointing: CheckpointingOpt = Checkpointing.none,
    attention: AttentionOpt = Attention.flash,
) -> None:
    """Check plans (or one DeepSpeed config) for CI: exit 0 clean, 1 on errors (or warnings with --strict), 2 on usage errors."""
    args = _scenario_args(locals(), ctx)

    def go() -> None:
        from zeroplan import checkrun

        checkrun.check_usage(plans or [], args, machine_output=fmt is not CheckFormat.text, output=output, force=force)
        if deepspeed_config:
            report = checkrun.check_deepspeed_config(deepspeed_config, args, ignore=ignore or [], strict=strict)
        else:
            report = checkrun.check_plans(plans or [], ignore=ignore or [], strict=strict)
        _emit_check(report, fmt, output, force)
        raise typer.Exit(report.exit_code)

    run(go)


def _emit_check(report, fmt: CheckFormat, output: Path | None, force: bool) -> None:
    """The report on stdout (text through rich), or written to --output."""
    if fmt is CheckFormat.text:
        from zeroplan.render_check import check_renderables

        console = _console()
        for part in check_renderables(report):
            console.print(part)
        return
    from zeroplan import checkformats

    if fmt is CheckFormat.json:
        import json

        text = json.dumps(checkformats.check_view(report), indent=2) + "\n"
    else:
        text = checkformats.github_report(report) if fmt is CheckFormat.github else checkformats.junit_report(report)
    if output is None:
        sys.stdout.write(text)
    else:
        from zeroplan.files import write_new_file

        write_new_file(output, text, force=force)


class GridFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


AxisOpt = Annotated[str, typer.Option(help="Comma list of values and inclusive ranges A-B or A-B:STEP.")]


@app.command()
def sweep(
    model: ModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    precision: PrecisionOpt = Precision.bf16_mixed,
    optimizer: OptimizerOpt = Optimizer.adamw,
    seq_len: SeqLenOpt = "2048",
    attention: AttentionOpt = Attention.flash,
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
    args, grid = _scenario_args(locals()), _grid_args(locals())

    def go() -> None:
        from zeroplan import commands, views

        result = commands.sweep(args, grid)
        if fmt is GridFormat.csv:
            sys.stdout.write(views.grid_csv(result.rows))
        else:
            _show(lambda: views.grid_view(result), lambda: render.grid_summary(result, units), Format(fmt.value))

    run(go)


@app.command("hardware")
def list_hardware(fmt: FormatOpt = Format.table) -> None:
    """List the hardware presets: capacity, TFLOPS, fabric, sources."""
    from zeroplan import commands

    def go() -> None:
        data = commands.hardware_output()
        _show(lambda: data, lambda: [render.hardware_table(data["hardware"])], fmt)

    run(go)


class _LazyRender:
    """zeroplan.render, imported on first attribute access: JSON output never loads rich."""

    def __getattr__(self, name: str):
        from zeroplan import render as module

        return getattr(module, name)


render = _LazyRender()


def _show(data: Callable[[], dict], renderables: Callable[[], list], fmt: Format) -> None:
    """Print machine output (data) or the rich renderables; each is built only when needed."""
    if fmt in (Format.json, Format.yaml):
        _emit(data(), fmt)
    elif fmt is Format.markdown:
        from zeroplan.markdown import to_markdown

        sys.stdout.write(to_markdown(data()) + "\n")
    else:
        console = _console()
        for part in renderables():
            console.print(part)


@app.command("models")
def list_models(fmt: FormatOpt = Format.table) -> None:
    """List the model presets with their parameter counts and sources."""
    from zeroplan import commands

    def go() -> None:
        data, table = commands.models_output()
        _show(lambda: data, lambda: [table()], fmt)

    run(go)


# advise and throughput live in cli_advise.py (cli.py stays near its size budget); importing it registers them.
from zeroplan import cli_advise  # noqa: E402, F401


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point.

    `zeroplan COMMAND ...` builds only COMMAND's click command: typer converts every registered command's
    options on each start (~8 ms a command), and a run needs one. Anything else (--help, no command, a
    typo) goes through the whole app, so listings and suggestions stay complete.
    """
    # pydantic scans installed entry points for plugins on first validation (~20 ms); the CLI uses none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    argv = sys.argv[1:] if argv is None else argv
    info = next((c for c in app.registered_commands if argv and _command_name(c) == argv[0]), None)
    if info is None:
        app(args=argv, prog_name="zeroplan")
        return
    single = typer.Typer(**APP_SETTINGS)
    single.registered_commands.append(info)
    single(args=argv[1:], prog_name=f"zeroplan {argv[0]}")


def _command_name(info) -> str:
    return info.name or info.callback.__name__.replace("_", "-")
