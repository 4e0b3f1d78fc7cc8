"""`zeroplan throughput`: step time, MFU and communication overhead per ZeRO stage."""




from zeroplan.cli.common import run, scenario_args, show
from zeroplan.cli.options import (
    PARALLELISM,
    SETUP,
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
from zeroplan.hardware.presets import DEFAULT_HARDWARE
from zeroplan.memory.setup import (
    OffloadDevice,
)


def throughput(
    model: ModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    gpus: GpusOpt = str(PARALLELISM.gpus),
    nodes: NodesOpt = str(PARALLELISM.nodes),
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    precision: PrecisionOpt = SETUP.precision,
    optimizer: OptimizerOpt = SETUP.optimizer,
    seq_len: SeqLenOpt = str(SETUP.seq_len),
    micro_batch: MicroBatchOpt = str(SETUP.micro_batch),
    grad_accum: GradAccumOpt = str(SETUP.grad_accum),
    checkpointing: CheckpointingOpt = SETUP.checkpointing,
    attention: AttentionOpt = SETUP.attention,
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
