"""`zeroplan advise`: parse -> compute -> render, and write the DeepSpeed or Accelerate config it recommends."""

from pathlib import Path
from typing import Annotated

import typer

from zeroplan.advise.request import DEFAULT_GLOBAL_BATCH, DEFAULT_POLICY
from zeroplan.cli.common import console, run, scenario_args, show
from zeroplan.cli.files import write_new_file
from zeroplan.cli.options import (
    PARALLELISM,
    SETUP,
    AdviseModelOpt,
    AttentionOpt,
    EmitAccelerateOpt,
    EmitOpt,
    EngineOpt,
    ForceOpt,
    Format,
    FormatOpt,
    GlobalBatchOpt,
    GpusOpt,
    HardwareOpt,
    LargestOpt,
    NodesOpt,
    OptimizerOpt,
    ParamsOpt,
    PolicyFileOpt,
    PolicyName,
    PolicyOpt,
    PrecisionOpt,
    SeqLenOpt,
    SetOpt,
    TopologyOpt,
    UnitsOpt,
)
from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import DEFAULT_HARDWARE
from zeroplan.memory.setup import Checkpointing, Engine
from zeroplan.units import Unit


def advise(
    model: AdviseModelOpt = None,
    params: ParamsOpt = None,
    largest_layer: LargestOpt = None,
    gpus: GpusOpt = str(PARALLELISM.gpus),
    nodes: NodesOpt = str(PARALLELISM.nodes),
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    precision: PrecisionOpt = SETUP.precision,
    optimizer: OptimizerOpt = SETUP.optimizer,
    seq_len: SeqLenOpt = str(SETUP.seq_len),
    checkpointing: Annotated[Checkpointing, typer.Option("--checkpointing", help="The least activation checkpointing to consider.")] = SETUP.checkpointing,
    attention: AttentionOpt = SETUP.attention,
    engine: EngineOpt = Engine.deepspeed,
    global_batch: GlobalBatchOpt = str(DEFAULT_GLOBAL_BATCH),
    topology: TopologyOpt = None,
    policy: PolicyOpt = PolicyName(DEFAULT_POLICY),
    policy_file: PolicyFileOpt = None,
    assignments: SetOpt = None,
    emit_deepspeed: EmitOpt = None,
    emit_accelerate: EmitAccelerateOpt = None,
    force: ForceOpt = False,
    units: UnitsOpt = Unit.gib,
    fmt: FormatOpt = Format.table,
) -> None:
    """Recommend a ZeRO stage (or the --engine's equivalent), offload, micro-batch and checkpointing, with the trace."""
    from zeroplan.advise.request import AdviseArgs

    args = scenario_args(locals())
    opts = AdviseArgs(global_batch=global_batch, topology=topology, policy=policy.value, policy_file=policy_file,
                      assignments=tuple(assignments or ()))
    target = Path(emit_deepspeed) if emit_deepspeed else None
    accelerate = Path(emit_accelerate) if emit_accelerate else None

    def go() -> None:
        from zeroplan.advise.request import advise_from
        from zeroplan.advise.view import advice_view
        from zeroplan.cli import advising as commands_advise
        from zeroplan.cli.render import advice as render_advice

        commands_advise.check_emit(engine, target is not None, accelerate is not None)
        for path in (target, accelerate):
            if path is not None and path.exists() and not force:
                raise ZeroplanError(f"{path}: already exists; pass --force to overwrite it")
        result = advise_from(args, opts)
        show(lambda: advice_view(result), lambda: render_advice.advice_renderables(result, units), fmt)
        if target is not None:
            write_new_file(target, commands_advise.deepspeed_config_text(result), force=force)
            note = commands_advise.emit_note(result)
            console(stderr=True).print(f"wrote {target}: DeepSpeed config for the recommendation{note}",
                                        soft_wrap=True)
        if accelerate is not None:
            text, notes = commands_advise.accelerate_config_text(result)
            write_new_file(accelerate, text, force=force)
            console(stderr=True).print(f"wrote {accelerate}: Accelerate config for the recommendation; "
                                        + "; ".join(notes), soft_wrap=True)

    run(go)
