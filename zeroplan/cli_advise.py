"""`zeroplan advise` and `zeroplan throughput`: parse -> compute -> render, and write the DeepSpeed or Accelerate config.

Registered on cli.app when cli.py imports this module; the option aliases and the error boundary are cli.py's.
"""

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from zeroplan.cli import (
    DEFAULT_HARDWARE,
    AttentionOpt,
    EngineOpt,
    CheckpointingOpt,
    Format,
    FormatOpt,
    GpusOpt,
    GradAccumOpt,
    HardwareOpt,
    KnobOpt,
    LargestOpt,
    MicroBatchOpt,
    ModelOpt,
    NodesOpt,
    OffloadOptOpt,
    OffloadParamOpt,
    OptimizerOpt,
    OverlapOpt,
    ParamsOpt,
    PrecisionOpt,
    SeqLenOpt,
    UnitsOpt,
    _console,
    _scenario_args,
    _show,
    app,
    run,
)
from zeroplan.errors import ZeroplanError
from zeroplan.files import write_new_file
from zeroplan.spec import Attention, Checkpointing, Engine, OffloadDevice, Optimizer, Precision, Topology
from zeroplan.units import Unit


class PolicyName(str, Enum):
    article = "article"
    default = "default"


AdviseModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="Preset name, YAML spec path or HF config.json path (default: gemma2-9b).")]
GlobalBatchOpt = Annotated[str, typer.Option("--global-batch", help="Sequences per optimizer step over all GPUs (= micro-batch x accumulation x GPUs).")]
TopologyOpt = Annotated[Optional[Topology], typer.Option("--topology", help="How the GPUs talk (default: the hardware's fabric; multinode past one node).")]
PolicyOpt = Annotated[PolicyName, typer.Option("--policy", help="article: the source article's tree as written; default: zeroplan's.")]
PolicyFileOpt = Annotated[Optional[str], typer.Option("--policy-file", help="YAML mapping of policy thresholds to override (docs/advisor.md).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override one policy threshold, key=value; repeatable, applied after --policy-file.")]
EmitOpt = Annotated[Optional[str], typer.Option("--emit-deepspeed", help="Write a DeepSpeed config for the recommendation to this path.")]
EmitAccelerateOpt = Annotated[Optional[str], typer.Option("--emit-accelerate", help="Write an Accelerate config (FSDP or DDP) for an --engine fsdp|fsdp2|ddp recommendation to this path.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Let --emit-deepspeed / --emit-accelerate overwrite an existing file.")]
MfuOpt = Annotated[Optional[float], typer.Option("--mfu", help="Share of dense peak the compute reaches (default: the hardware preset's).")]
SweepOpt = Annotated[Optional[str], typer.Option("--sweep", help="Global batches to sweep, comma-separated, or 'auto' (GPUs x 1..512).")]
MaxMicroOpt = Annotated[Optional[str], typer.Option("--max-micro-batch", help="Sweep: largest micro-batch, accumulation above it (default: the largest ZeRO-3 fits).")]


@app.command()
def advise(
    model: AdviseModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    gpus: GpusOpt = "8",
    nodes: NodesOpt = "1",
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    precision: PrecisionOpt = Precision.bf16_mixed,
    optimizer: OptimizerOpt = Optimizer.adamw,
    seq_len: SeqLenOpt = "2048",
    checkpointing: Annotated[Checkpointing, typer.Option("--checkpointing", help="The least activation checkpointing to consider.")] = Checkpointing.none,
    attention: AttentionOpt = Attention.flash,
    engine: EngineOpt = Engine.deepspeed,
    global_batch: GlobalBatchOpt = "512",
    topology: TopologyOpt = None,
    policy: PolicyOpt = PolicyName.default,
    policy_file: PolicyFileOpt = None,
    assignments: SetOpt = None,
    emit_deepspeed: EmitOpt = None,
    emit_accelerate: EmitAccelerateOpt = None,
    force: ForceOpt = False,
    units: UnitsOpt = Unit.gib,
    fmt: FormatOpt = Format.table,
) -> None:
    """Recommend a ZeRO stage (or the --engine's equivalent), offload, micro-batch and checkpointing, with the trace."""
    from zeroplan.commands_advise import AdviseArgs

    args = _scenario_args(locals())
    opts = AdviseArgs(global_batch=global_batch, topology=topology, policy=policy.value, policy_file=policy_file,
                      assignments=tuple(assignments or ()))
    target = Path(emit_deepspeed) if emit_deepspeed else None
    accelerate = Path(emit_accelerate) if emit_accelerate else None

    def go() -> None:
        from zeroplan import commands_advise, render_advice, views_advice

        commands_advise.check_emit(engine, target is not None, accelerate is not None)
        for path in (target, accelerate):
            if path is not None and path.exists() and not force:
                raise ZeroplanError(f"{path}: already exists; pass --force to overwrite it")
        result = commands_advise.advise(args, opts)
        _show(lambda: views_advice.advice_view(result), lambda: render_advice.advice_renderables(result, units), fmt)
        if target is not None:
            write_new_file(target, commands_advise.deepspeed_config_text(result), force=force)
            note = commands_advise.emit_note(result)
            _console(stderr=True).print(f"wrote {target}: DeepSpeed config for the recommendation{note}",
                                        soft_wrap=True)
        if accelerate is not None:
            text, notes = commands_advise.accelerate_config_text(result)
            write_new_file(accelerate, text, force=force)
            _console(stderr=True).print(f"wrote {accelerate}: Accelerate config for the recommendation; "
                                        + "; ".join(notes), soft_wrap=True)

    run(go)


@app.command()
def throughput(
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
    offload_optimizer: OffloadOptOpt = OffloadDevice.none,
    offload_param: OffloadParamOpt = OffloadDevice.none,
    overlap_comm: OverlapOpt = None,
    prefetch_bucket_size: KnobOpt = None,
    hpz_partition_size: KnobOpt = None,
    topology: TopologyOpt = None,
    mfu: MfuOpt = None,
    sweep: SweepOpt = None,
    max_micro_batch: MaxMicroOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per stage: step time, tokens/s per GPU, MFU and overhead over ZeRO-0; --sweep over global batch."""
    from zeroplan.commands_advise import ThroughputArgs

    args = _scenario_args(locals())
    opts = ThroughputArgs(topology=topology, mfu=mfu, sweep=sweep, max_micro_batch=max_micro_batch)

    def go() -> None:
        from zeroplan import commands_advise, render_advice

        result = commands_advise.throughput(args, opts)
        _show(lambda: result, lambda: render_advice.throughput_renderables(result), fmt)

    run(go)
