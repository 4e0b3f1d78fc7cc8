"""`zeroplan throughput`: step time, MFU and communication overhead per ZeRO stage."""




from zeroplan.cli.common import run, scenario_args, show
from zeroplan.cli.options import (
    DEFAULT_HARDWARE,
    AttentionOpt,
    CheckpointingOpt,
    Format,
    FormatOpt,
    GpusOpt,
    GradAccumOpt,
    HardwareOpt,
    KnobOpt,
    LargestOpt,
    MaxMicroOpt,
    MfuOpt,
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
    SweepOpt,
    TopologyOpt,
)
from zeroplan.memory.setup import (
    Attention,
    Checkpointing,
    OffloadDevice,
    Optimizer,
    Precision,
)


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
    from zeroplan.cli.advising import ThroughputArgs

    args = scenario_args(locals())
    opts = ThroughputArgs(topology=topology, mfu=mfu, sweep=sweep, max_micro_batch=max_micro_batch)

    def go() -> None:
        from zeroplan.cli import advising as commands_advise
        from zeroplan.cli.render import advice as render_advice

        result = commands_advise.throughput(args, opts)
        show(lambda: result, lambda: render_advice.throughput_renderables(result), fmt)

    run(go)
