"""`zeroplan capacity`: the largest micro-batch, the fewest GPUs and the largest model per stage."""


import typer

from zeroplan.cli.common import render, run, scenario_args, show
from zeroplan.cli.options import (
    DEFAULT_HARDWARE,
    AttentionOpt,
    CheckpointingOpt,
    Format,
    FormatOpt,
    GpusOpt,
    HardwareOpt,
    LargestOpt,
    MicroBatchOpt,
    ModelOpt,
    NodesOpt,
    OffloadOptOpt,
    OffloadParamOpt,
    OptimizerOpt,
    ParamsOpt,
    PrecisionOpt,
    SeqLenOpt,
    UnitsOpt,
)
from zeroplan.memory.setup import (
    Attention,
    Checkpointing,
    OffloadDevice,
    Optimizer,
    Precision,
)
from zeroplan.units import Unit


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
    args = scenario_args(locals(), ctx)

    def go() -> None:
        from zeroplan import scenario

        result = scenario.capacity(args)
        show(lambda: result, lambda: render.capacity_renderables(result, units), fmt)

    run(go)
