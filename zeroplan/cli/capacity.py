"""`zeroplan capacity`: the largest micro-batch, the fewest GPUs and the largest model per stage."""


import typer

from zeroplan.cli.common import render, run, scenario_args, show
from zeroplan.cli.options import (
    PARALLELISM,
    SETUP,
    AttentionOpt,
    CheckpointingOpt,
    Format,
    FormatOpt,
    GpusOpt,
    HardwareOpt,
    LargestOpt,
    LossOpt,
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
from zeroplan.cli.options import (
    AdapterConfigOpt,
    DoraOpt,
    DoubleQuantOpt,
    FreezeOpt,
    Int8Opt,
    LoraDropoutOpt,
    LoraRankOpt,
    LoraTargetsOpt,
    ModulesToSaveOpt,
    OptimInBwdOpt,
    QloraOpt,
    QuantStorageName,
    QuantStorageOpt,
    QuantType,
    QuantTypeOpt,
)
from zeroplan.hardware.presets import DEFAULT_HARDWARE
from zeroplan.memory.setup import (
    OffloadDevice,
)
from zeroplan.units import Unit


def capacity(
    ctx: typer.Context,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    gpus: GpusOpt = str(PARALLELISM.gpus),
    nodes: NodesOpt = None,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    precision: PrecisionOpt = SETUP.precision,
    optimizer: OptimizerOpt = SETUP.optimizer,
    seq_len: SeqLenOpt = str(SETUP.seq_len),
    micro_batch: MicroBatchOpt = str(SETUP.micro_batch),
    checkpointing: CheckpointingOpt = SETUP.checkpointing.value,
    attention: AttentionOpt = SETUP.attention,
    loss: LossOpt = SETUP.loss,
    offload_optimizer: OffloadOptOpt = OffloadDevice.none,
    offload_param: OffloadParamOpt = OffloadDevice.none,
    freeze: FreezeOpt = None,
    lora_rank: LoraRankOpt = None,
    lora_targets: LoraTargetsOpt = None,
    lora_dropout: LoraDropoutOpt = None,
    dora: DoraOpt = False,
    modules_to_save: ModulesToSaveOpt = None,
    qlora: QloraOpt = False,
    quant_type: QuantTypeOpt = QuantType.nf4,
    double_quant: DoubleQuantOpt = False,
    quant_storage: QuantStorageOpt = QuantStorageName.uint8,
    load_in_8bit: Int8Opt = False,
    adapter_config: AdapterConfigOpt = None,
    optimizer_in_backward: OptimInBwdOpt = False,
    units: UnitsOpt = Unit.gib,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per stage: the largest micro-batch that fits, the fewest GPUs, and the largest model (scaled in depth)."""
    args = scenario_args(locals(), ctx)

    def go() -> None:
        from zeroplan.scenario import answers

        result = answers.capacity(args)
        show(lambda: result, lambda: render.capacity_renderables(result, units), fmt)

    run(go, fmt)
