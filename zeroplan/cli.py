"""The typer app: parse -> load -> compute -> render. The only module that prints or exits."""

import os
import sys
from typing import Annotated, Callable

import typer

from zeroplan.cli_options import (  # the option types the signatures below name
    DEFAULT_HARDWARE, AttentionOpt, CheckpointingOpt, DsConfigOpt, Format, FormatOpt, Fp32AccumOpt, FragOpt,
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
    # markup=False: text is never parsed for [style] tags, so a name or message with brackets prints as
    # typed (and cannot raise rich's MarkupError); styles come from Text objects. Also skips that parse
    # for every table cell, as emoji=False skips the :emoji: scan.
    return Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=False, width=width,
                   markup=False, emoji=False)  # fmt: skip


def _error(message: str) -> None:
    """One red 'error:' line on stderr; the message is printed as is."""
    from rich.text import Text

    _console(stderr=True).print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)


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
        _error(str(exc))
        raise typer.Exit(2 if isinstance(exc, UsageError) else 1) from None
    except Exception as exc:
        if not _is_validation_error(exc):
            raise
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            _error(f"{where + ': ' if where else ''}{msg}")
        raise typer.Exit(1) from None


def _is_validation_error(exc: Exception) -> bool:
    """Whether `exc` is pydantic's ValidationError. pydantic is imported only by the paths that read files
    into pydantic models (plans, DeepSpeed configs, model specs), so when it is not loaded, no such error exists."""
    pydantic_core = sys.modules.get("pydantic_core")
    return pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError)


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
            console.print(render.pin_widths(part, console.width))


@app.command("models")
def list_models(fmt: FormatOpt = Format.table) -> None:
    """List the model presets with their parameter counts and sources."""
    from zeroplan import commands

    def go() -> None:
        data, table = commands.models_output()
        _show(lambda: data, lambda: [table()], fmt)

    run(go)


# advise and throughput live in cli_advise.py (cli.py stays near its size budget); importing it registers them.
from zeroplan import cli_advise, cli_check, cli_sweep  # noqa: E402, F401 - each registers its commands on app


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


# --help lists the commands in the order a new user reaches for them.
COMMAND_ORDER = ("estimate", "advise", "check", "capacity", "throughput", "sweep", "models", "hardware")
app.registered_commands.sort(key=lambda c: COMMAND_ORDER.index(_command_name(c)))
