"""What each CLI command does between parsing and printing: resolve presets, build inputs, call the calculator.

Raises ZeroplanError for bad input; never prints or exits (cli.py does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from zeroplan import presets
from zeroplan.dscompat import DeepSpeedEstimate, estimate_deepspeed
from zeroplan.errors import ZeroplanError
from zeroplan.estimate import Estimate, estimate_memory, summarize_model
from zeroplan.memory import ModelSummary
from zeroplan.spec import (
    Architecture,
    DeepSpeedKnobs,
    OffloadDevice,
    Optimizer,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.units import Unit


@dataclass(frozen=True)
class EstimateArgs:
    """The estimate command's options, as typed on the command line."""

    model: str | None = None
    params: str | None = None
    largest_layer: str | None = None
    gpus: str = "8"
    nodes: str = "1"
    stage: int | None = None
    precision: Precision = Precision.bf16_mixed
    optimizer: Optimizer = Optimizer.adamw
    fp32_grad_accum: bool = False
    offload_optimizer: OffloadDevice = OffloadDevice.none
    offload_param: OffloadDevice = OffloadDevice.none
    buffer_factor: float = 1.5


def _count(text: str, what: str) -> int:
    from zeroplan.cli import parse_count

    return parse_count(text, what)


def resolve_model(model: str | None, params: str | None, largest_layer: str | None,
                  knobs: DeepSpeedKnobs) -> tuple[ModelSummary, Architecture | None]:
    """A ModelSummary (and the architecture, when known) from --model or --params."""
    if model and params:
        raise ZeroplanError("give either --model or --params, not both")
    if not model and not params:
        raise ZeroplanError("give --model NAME|PATH or --params N (e.g. --params 9e9)")
    override = _count(largest_layer, "--largest-layer") if largest_layer else None
    if params:
        num = _count(params, "--params")
        if override is not None and override > num:
            raise ZeroplanError(f"--largest-layer ({override:,}) is larger than --params ({num:,})")
        return ModelSummary(name=f"{num / 1e9:g}B params", num_params=num, largest_layer_params=override or 0), None
    from zeroplan.params import count_params

    spec = presets.load_model(model)
    counts = count_params(spec.config)
    arch = spec.architecture()
    summary = summarize_model(spec.name, counts, arch, knobs)
    if override is not None:
        summary = summary.model_copy(update={"largest_layer_params": override})
    return summary, arch


def _parallelism(gpus: str, nodes: str) -> Parallelism:
    return Parallelism(gpus=_count(gpus, "--gpus"), nodes=_count(nodes, "--nodes"))


def _stages(stage: int | None) -> tuple[ZeroStage, ...]:
    return tuple(ZeroStage) if stage is None else (ZeroStage(stage),)


def estimate(args: EstimateArgs) -> Estimate:
    par = _parallelism(args.gpus, args.nodes)
    knobs = DeepSpeedKnobs(offload_optimizer=args.offload_optimizer, offload_param=args.offload_param)
    summary, _arch = resolve_model(args.model, args.params, args.largest_layer, knobs)
    setup = TrainingSetup(precision=args.precision, optimizer=args.optimizer, fp32_grad_accum=args.fp32_grad_accum)
    notes = ("activations, CUDA context/NCCL and fragmentation not modelled yet: shown as 0; fits is null",)
    return estimate_memory(summary, setup, par, knobs, stages=_stages(args.stage), assumptions=notes)


def deepspeed_estimate(args: EstimateArgs) -> DeepSpeedEstimate:
    par = _parallelism(args.gpus, args.nodes)
    summary, _ = resolve_model(args.model, args.params, args.largest_layer, DeepSpeedKnobs())
    if not args.buffer_factor > 0 or args.buffer_factor != args.buffer_factor or args.buffer_factor == float("inf"):
        raise ZeroplanError(f"--buffer-factor {args.buffer_factor} must be a positive finite number")
    return estimate_deepspeed(summary.num_params, summary.largest_layer_params, par.gpus_per_node, par.nodes,
                              args.buffer_factor)


def models_output() -> tuple[dict, Callable]:
    from zeroplan.params import count_params

    rows = []
    for spec in presets.all_models():
        counts = count_params(spec.config)
        rows.append({
            "name": spec.name, "family": spec.architecture().family, "num_params": counts.num_params,
            "reference_params": spec.reference_params, "largest_layer_params": counts.largest_layer_params,
            "num_active_params": counts.num_active_params, "source": spec.source,
        })
    from zeroplan import render

    return {"models": rows}, lambda: render.models_table(rows)
