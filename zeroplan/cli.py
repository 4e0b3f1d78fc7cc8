"""The typer app: parse -> load -> compute -> render. The only module that prints or exits."""

from __future__ import annotations

import os
import sys
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Annotated, Callable, Optional

import typer
from pydantic import ValidationError

from zeroplan.errors import ZeroplanError
from zeroplan.spec import Attention, Checkpointing, OffloadDevice, Optimizer, Precision
from zeroplan.units import Unit

app = typer.Typer(
    name="zeroplan",
    help="Plan DeepSpeed ZeRO training runs: per-GPU memory per stage, throughput, advice, CI checks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

PIPE_WIDTH = 110  # console width when stdout is not a terminal
MAX_COUNT = 10**18  # parameter counts and sizes beyond this are typos, not models


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"
    markdown = "markdown"


class Method(str, Enum):
    zeroplan = "zeroplan"
    deepspeed = "deepspeed"


def _console(stderr: bool = False):
    from rich.console import Console

    tty = (sys.stderr if stderr else sys.stdout).isatty()
    no_color = bool(os.environ.get("NO_COLOR")) or not tty
    # Off a terminal rich assumes 80 columns; the stage tables need more to stay readable in logs.
    width = None if tty else PIPE_WIDTH
    return Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=False, width=width)


def parse_count(text: str, what: str = "count") -> int:
    """A positive whole number from '9e9', '7_000_000_000' or '124439808'; ZeroplanError otherwise."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        raise ZeroplanError(f"{what} {text!r} is not a number") from None
    if not value.is_finite():
        raise ZeroplanError(f"{what} {text!r} is not finite")
    if value != value.to_integral_value():
        raise ZeroplanError(f"{what} {text!r} is not a whole number")
    if value <= 0:
        raise ZeroplanError(f"{what} {text!r} must be positive")
    if value > MAX_COUNT:
        raise ZeroplanError(f"{what} {text!r} is larger than {MAX_COUNT:.0e}")
    return int(value)


def _emit(data: dict, fmt: Format) -> None:
    """Machine output on stdout, nothing else."""
    if fmt is Format.json:
        import json

        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif fmt is Format.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))


def run(fn):
    """The one error boundary: ZeroplanError / ValidationError -> one red line on stderr, exit 1."""
    try:
        return fn()
    except ZeroplanError as exc:
        _console(stderr=True).print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            _console(stderr=True).print(f"[red]error:[/red] {where + ': ' if where else ''}{msg}", soft_wrap=True)
        raise typer.Exit(1) from None


ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="Preset name, YAML spec path or HF config.json path.")]
ParamsOpt = Annotated[Optional[str], typer.Option("--params", help="Bare parameter count, e.g. 9e9.")]
LargestOpt = Annotated[Optional[str], typer.Option("--largest-layer", help="Largest layer's parameters (DeepSpeed's definition); taken from --model when given.")]
GpusOpt = Annotated[str, typer.Option("--gpus", "-g", help="Total GPUs (data-parallel degree).")]
NodesOpt = Annotated[str, typer.Option("--nodes", "-n", help="Nodes the GPUs are spread over.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help="Hardware preset or YAML path; 'none' for no fit verdict.")]
StageOpt = Annotated[Optional[int], typer.Option("--stage", "-s", min=0, max=3, help="Only this ZeRO stage (default: all four).")]
PrecisionOpt = Annotated[Precision, typer.Option("--precision", help="Byte recipe precision.")]
OptimizerOpt = Annotated[Optimizer, typer.Option("--optimizer", help="Optimizer (sets the optimizer-state bytes).")]
Fp32AccumOpt = Annotated[bool, typer.Option("--fp32-grad-accum", help="Accumulate gradients in fp32 (+4 B/param).")]
SeqLenOpt = Annotated[str, typer.Option("--seq-len", help="Tokens per sequence.")]
MicroBatchOpt = Annotated[str, typer.Option("--micro-batch", help="Sequences per GPU per micro-step.")]
GradAccumOpt = Annotated[str, typer.Option("--grad-accum", help="Micro-steps per optimizer step.")]
CheckpointingOpt = Annotated[Checkpointing, typer.Option("--checkpointing", help="Activation checkpointing.")]
AttentionOpt = Annotated[Attention, typer.Option("--attention", help="eager keeps score matrices; flash (SDPA) does not.")]
OffloadOptOpt = Annotated[OffloadDevice, typer.Option("--offload-optimizer", help="Optimizer offload (ZeRO-1/2: cpu; ZeRO-3: cpu or nvme).")]
OffloadParamOpt = Annotated[OffloadDevice, typer.Option("--offload-param", help="Parameter offload (ZeRO-3 only).")]
KnobOpt = Annotated[Optional[str], typer.Option(help="DeepSpeed zero_optimization knob (elements); DeepSpeed's default when not given.")]
OverlapOpt = Annotated[Optional[bool], typer.Option("--overlap-comm/--no-overlap-comm", help="DeepSpeed overlap_comm (default: on for stage 3 only).")]
GibOpt = Annotated[Optional[float], typer.Option(help="Override the hardware profile's value, GiB.")]
FragOpt = Annotated[Optional[float], typer.Option("--fragmentation", help="Allocator fragmentation margin, fraction of the allocated peak.")]
UnitsOpt = Annotated[Unit, typer.Option("--units", help="Display unit: gib (2^30) or gb (1e9).")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
DEFAULT_HARDWARE = "h100-sxm-80gb"


def _scenario_args(values: dict):
    """The ScenarioArgs out of a command's locals()."""
    from dataclasses import fields

    from zeroplan.commands import ScenarioArgs

    names = {f.name for f in fields(ScenarioArgs)}
    return ScenarioArgs(**{k: v for k, v in values.items() if k in names})


def _grid_args(values: dict):
    from dataclasses import fields

    from zeroplan.commands import GridArgs

    return GridArgs(**{f.name: values[f.name] for f in fields(GridArgs)})


@app.command()
def estimate(
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
    method: Annotated[Method, typer.Option(help="zeroplan's model, or DeepSpeed's own estimator functions to the byte.")] = Method.zeroplan,
    buffer_factor: Annotated[float, typer.Option(help="DeepSpeed's additional_buffer_factor (--method deepspeed).")] = 1.5,
    units: UnitsOpt = Unit.gib,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per-GPU memory under each ZeRO stage: model states, buffers, activations, overhead."""
    args = _scenario_args(locals())

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
    args = _scenario_args(locals())

    def go() -> None:
        from zeroplan import commands

        result = commands.capacity(args)
        _show(lambda: result, lambda: render.capacity_renderables(result, units), fmt)

    run(go)


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


def main() -> None:
    """Console-script entry point."""
    # pydantic scans installed entry points for plugins on first validation (~20 ms); the CLI uses none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    app()
