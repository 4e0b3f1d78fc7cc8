"""`zeroplan estimate`: per-GPU memory under each ZeRO stage."""

from typing import Annotated

import typer

from zeroplan.cli.common import print_warning, render, run, scenario_args, show
from zeroplan.cli.options import (
    PARALLELISM,
    SETUP,
    AttentionOpt,
    CheckpointingOpt,
    CpCommOpt,
    CpOpt,
    DsConfigOpt,
    EngineOpt,
    EpOpt,
    ForceOpt,
    Format,
    FormatOpt,
    Fp32AccumOpt,
    FragOpt,
    FromKindOpt,
    FromOpt,
    GibOpt,
    GpusOpt,
    GradAccumOpt,
    HardwareOpt,
    HtmlOpt,
    KnobOpt,
    LargestOpt,
    Method,
    LossOpt,
    MicroBatchOpt,
    ModelOpt,
    NodesOpt,
    OffloadOptOpt,
    OffloadParamOpt,
    OptimizerOpt,
    OverlapOpt,
    ParamsOpt,
    PpOpt,
    PpScheduleOpt,
    PrecisionOpt,
    SeqLenOpt,
    SeqParallelOpt,
    StageOpt,
    TpOpt,
    UnitsOpt,
    PpFirstOpt,
    PpLastOpt,
    VppOpt,
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
from zeroplan.errors import UsageError
from zeroplan.hardware.presets import DEFAULT_HARDWARE
from zeroplan.memory.setup import (
    Engine,
    OffloadDevice,
)
from zeroplan.models.mesh import CpComm
from zeroplan.units import Unit


def estimate(
    ctx: typer.Context,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    gpus: GpusOpt = str(PARALLELISM.gpus),
    nodes: NodesOpt = None,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    stage: StageOpt = None,
    precision: PrecisionOpt = SETUP.precision,
    optimizer: OptimizerOpt = SETUP.optimizer,
    fp32_grad_accum: Fp32AccumOpt = SETUP.fp32_grad_accum,
    seq_len: SeqLenOpt = str(SETUP.seq_len),
    micro_batch: MicroBatchOpt = str(SETUP.micro_batch),
    grad_accum: GradAccumOpt = str(SETUP.grad_accum),
    checkpointing: CheckpointingOpt = SETUP.checkpointing.value,
    attention: AttentionOpt = SETUP.attention,
    loss: LossOpt = SETUP.loss,
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
    from_file: FromOpt = None,
    from_kind: FromKindOpt = None,
    engine: EngineOpt = Engine.deepspeed,
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
    method: Annotated[Method, typer.Option(help="zeroplan's model, or DeepSpeed's estimator functions or Megatron-LM's theoretical memory formula, to the byte.")] = Method.zeroplan,
    buffer_factor: Annotated[float, typer.Option(help="DeepSpeed's additional_buffer_factor (--method deepspeed).")] = 1.5,
    tp: TpOpt = None,
    pp: PpOpt = None,
    cp: CpOpt = None,
    cp_comm: CpCommOpt = CpComm.p2p,
    ep: EpOpt = None,
    vpp: VppOpt = None,
    pp_first_layers: PpFirstOpt = None,
    pp_last_layers: PpLastOpt = None,
    pp_schedule: PpScheduleOpt = None,
    sequence_parallel: SeqParallelOpt = False,
    units: UnitsOpt = Unit.gib,
    fmt: FormatOpt = Format.table,
    html: HtmlOpt = None,
    force: ForceOpt = False,
) -> None:
    """Per-GPU memory under each ZeRO stage (a --deepspeed-config's or --from file's stage): model states, buffers, activations, overhead."""
    args = scenario_args(locals(), ctx)

    def go() -> None:
        from zeroplan.cli import views
        from zeroplan.cli.files import html_target, write_report
        from zeroplan.scenario import answers
        from zeroplan.scenario.parallel import MeshArgs

        if html is not None and method is not Method.zeroplan:
            raise UsageError(f"--html draws zeroplan's estimate; --method {method.value} prints its own tables only")
        report = html_target(html, force)
        mesh = MeshArgs(tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, schedule=pp_schedule, cp_comm=cp_comm,
                        pp_first_layers=pp_first_layers, pp_last_layers=pp_last_layers,
                        sequence_parallel=sequence_parallel)
        if method is Method.megatron and cp_comm is not CpComm.p2p:
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
                from zeroplan.cli.render.html import estimate_report

                write_report(report, estimate_report(estimate_view(result, units)), force)
            show(lambda: estimate_view(result, units), lambda: render.estimate_renderables(result, units), fmt)

    run(go, fmt)


def _megatron_tables(found, units: Unit) -> list:
    from zeroplan.cli.render.megatron import megatron_tables

    return megatron_tables(found, units)
