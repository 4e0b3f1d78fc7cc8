"""`zeroplan advise`: parse -> compute -> render, and write the DeepSpeed or Accelerate config it recommends."""

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zeroplan.advise.request import DEFAULT_GLOBAL_BATCH, DEFAULT_POLICY
from zeroplan.cli.common import console, run, scenario_args, show
from zeroplan.cli.files import write_new_file
from zeroplan.cli.groups import takes
from zeroplan.cli.options import (
    CALIBRATION,
    ENGINE,
    FINETUNE,
    HARDWARE,
    INPUTS,
    MODEL,
    NETWORK,
    OUTPUT,
    SETUP,
    TRAINING,
    TRAINING_PANEL,
    AdviseModelOpt,
    EmitAccelerateOpt,
    EmitOpt,
    Format,
    GlobalBatchOpt,
    PolicyFileOpt,
    PolicyName,
    PolicyOpt,
    SetOpt,
)
from zeroplan.errors import UsageError
from zeroplan.memory.setup import Checkpointing, Engine
from zeroplan.units import Unit

if TYPE_CHECKING:  # the advice's pydantic models load when advise runs, not with every command
    from zeroplan.advise.advice import Advice
    from zeroplan.advise.layouts.result import LayoutAdvice


class StackName(str, Enum):
    """--stack: what the parallelism search plans for (zeroplan.advise.layouts.space.Stack)."""

    auto = "auto"
    deepspeed = "deepspeed"
    torchtitan = "torchtitan"


SEARCH_PANEL = "Parallelism search"
SearchOpt = Annotated[bool, typer.Option("--search-parallelism", rich_help_panel=SEARCH_PANEL, help="Search tp x pp x cp x dp x stage x checkpointing x micro-batch layouts and rank them by predicted step time.")]
StackOpt = Annotated[StackName, typer.Option("--stack", rich_help_panel=SEARCH_PANEL, help="With --search-parallelism: auto (DeepSpeed AutoTP where pp = cp = 1, torchtitan otherwise), deepspeed or torchtitan.")]
EmitTitanOpt = Annotated[str | None, typer.Option("--emit-torchtitan", rich_help_panel=SEARCH_PANEL, help="With --search-parallelism: write the torchtitan job-config sections of a torchtitan layout to this path.")]
LeastCheckpointingOpt = Annotated[Checkpointing, typer.Option("--checkpointing", rich_help_panel=TRAINING_PANEL, help="The least activation checkpointing to consider.")]


# advise sizes the micro-batch and chooses offload itself; it reads no ds_config (--from carries one).
@takes(MODEL, INPUTS.without("deepspeed_config"), HARDWARE, CALIBRATION, NETWORK,
       TRAINING.without("fp32_grad_accum", "micro_batch", "grad_accum"), FINETUNE, ENGINE.without("stage"), OUTPUT)
def advise(
    ctx: typer.Context,
    model: AdviseModelOpt = None,
    checkpointing: LeastCheckpointingOpt = SETUP.checkpointing,
    global_batch: GlobalBatchOpt = str(DEFAULT_GLOBAL_BATCH),
    policy: PolicyOpt = PolicyName(DEFAULT_POLICY),
    policy_file: PolicyFileOpt = None,
    assignments: SetOpt = None,
    search_parallelism: SearchOpt = False,
    stack: StackOpt = StackName.auto,
    emit_deepspeed: EmitOpt = None,
    emit_accelerate: EmitAccelerateOpt = None,
    emit_torchtitan: EmitTitanOpt = None,
    **options,
) -> None:
    """Recommend a ZeRO stage (or the --engine's equivalent), offload, micro-batch and checkpointing, with the trace."""
    from zeroplan.advise.request import AdviseArgs

    args = scenario_args({**options, "model": model, "checkpointing": checkpointing}, ctx)
    engine, html, force, units, fmt = (options[k] for k in ("engine", "html", "force", "units", "fmt"))
    opts = AdviseArgs(global_batch=global_batch, topology=options["topology"], policy=policy.value,
                      policy_file=policy_file, assignments=tuple(assignments or ()),
                      search_parallelism=search_parallelism, stack=stack.value)
    target = Path(emit_deepspeed) if emit_deepspeed is not None else None
    accelerate = Path(emit_accelerate) if emit_accelerate is not None else None

    def go() -> None:
        from zeroplan.advise.request import advise_from, searching
        from zeroplan.advise.view import advice_view
        from zeroplan.cli.files import check_target, html_target, write_report
        from zeroplan.cli.render import advice as render_advice

        if searching(opts):
            return search(opts, args, target, emit_torchtitan, emit_accelerate, html, force, units, fmt)
        if emit_torchtitan is not None:
            raise UsageError("--emit-torchtitan writes the config of a --search-parallelism layout; add "
                             "--search-parallelism")
        check_emit(engine, emit_deepspeed, emit_accelerate)
        for path in (target, accelerate):
            if path is not None:
                check_target(path, force)
        report = html_target(html, force)
        result = advise_from(args, opts)
        try:  # the files first: a closed or full stdout cannot lose them; the advice still shows why none fits
            _write_configs(result, target, accelerate, force)
            if report is not None:
                from zeroplan.cli.files import command_line
                from zeroplan.cli.render.html import advice_report

                write_report(report, advice_report(advice_view(result), command_line("advise")), force)
        finally:
            show(lambda: advice_view(result), lambda: render_advice.advice_renderables(result, units), fmt)

    run(go, fmt)


def search(opts, args, target: Path | None, emit_torchtitan: str | None, emit_accelerate: str | None,
           html: str | None, force: bool, units: Unit, fmt: Format) -> None:
    """`advise --search-parallelism`: the search, its configs written first, then the answer."""
    from zeroplan.advise.layouts.view import layout_advice_view
    from zeroplan.advise.request import search_from
    from zeroplan.cli.files import check_target
    from zeroplan.cli.render.layouts import layout_renderables

    if emit_accelerate is not None or html is not None:
        option = "--emit-accelerate" if emit_accelerate is not None else "--html"
        raise UsageError(f"{option} is not available with --search-parallelism (it writes --emit-deepspeed or "
                         "--emit-torchtitan)")
    titan = Path(emit_torchtitan) if emit_torchtitan is not None else None
    for option, path in (("--emit-deepspeed", target), ("--emit-torchtitan", titan)):
        if path is not None:
            if not str(path).strip():
                raise UsageError(f"{option} needs a file path, got {str(path)!r}")
            check_target(path, force)
    result = search_from(args, opts)
    try:
        _write_layout_configs(result, target, titan, force)
    finally:
        show(lambda: layout_advice_view(result), lambda: layout_renderables(result, units), fmt)


def _write_layout_configs(result: "LayoutAdvice", target: Path | None, titan: Path | None, force: bool) -> None:
    import json

    from zeroplan.advise.layouts.configs import autotp_config, torchtitan_toml

    if target is not None:
        write_new_file(target, json.dumps(autotp_config(result), indent=2) + "\n", force=force)
        console(stderr=True).print(f"wrote {target}: DeepSpeed AutoTP config for the chosen layout"
                                   + _ckpt_note(result), soft_wrap=True)
    if titan is not None:
        write_new_file(titan, torchtitan_toml(result), force=force)
        console(stderr=True).print(f"wrote {titan}: torchtitan job-config sections for the chosen layout; merge them "
                                   "into the job's TOML", soft_wrap=True)


def _ckpt_note(result: "LayoutAdvice") -> str:
    plan = result.recommendation
    if plan is None or plan.checkpointing.value == "none":
        return ""
    return (f"; turn on {plan.checkpointing.value} activation checkpointing in the training script (e.g. Hugging "
            "Face model.gradient_checkpointing_enable()): a DeepSpeed config does not switch it on")


def _write_configs(result: "Advice", target: Path | None, accelerate: Path | None, force: bool) -> None:
    """The DeepSpeed and Accelerate configs asked for, each followed by a 'wrote' line on stderr."""
    if target is not None:
        write_new_file(target, deepspeed_config_text(result), force=force)
        note = emit_note(result)
        console(stderr=True).print(f"wrote {target}: DeepSpeed config for the recommendation{note}", soft_wrap=True)
    if accelerate is not None:
        text, notes = accelerate_config_text(result)
        write_new_file(accelerate, text, force=force)
        console(stderr=True).print(f"wrote {accelerate}: Accelerate config for the recommendation; "
                                    + "; ".join(notes), soft_wrap=True)


def deepspeed_config_text(advice: "Advice") -> str:
    """The emitted ds_config.json, as the file will hold it."""
    import json

    from zeroplan.advise.emit import deepspeed_config

    return json.dumps(deepspeed_config(advice), indent=2) + "\n"


def accelerate_config_text(advice: "Advice") -> tuple[str, tuple[str, ...]]:
    """The emitted Accelerate config YAML, headed by its notes as comments, and the notes."""
    import yaml

    from zeroplan.advise.accelerate import accelerate_config

    config, notes = accelerate_config(advice)
    rec = advice.recommendation
    head = [f"# zeroplan advise --engine {rec.engine.value}: {rec.summary}"] + [f"# note: {n}" for n in notes]
    return "\n".join(head) + "\n" + yaml.safe_dump(config, sort_keys=False), notes


def check_emit(engine: Engine, emit_deepspeed: str | None, emit_accelerate: str | None) -> None:
    """The emit options the engine can take, before anything is computed: UsageError (exit 2) otherwise."""
    for option, value in (("--emit-deepspeed", emit_deepspeed), ("--emit-accelerate", emit_accelerate)):
        if value is not None and not value.strip():
            raise UsageError(f"{option} needs a file path, got {value!r}")
    if emit_deepspeed is not None and engine is not Engine.deepspeed:
        raise UsageError(f"--emit-deepspeed writes a DeepSpeed config, and --engine {engine.value} runs no DeepSpeed: "
                         "use --emit-accelerate PATH for its Accelerate config")
    if emit_accelerate is not None and engine is Engine.deepspeed:
        raise UsageError("--emit-accelerate writes the Accelerate config of --engine fsdp, fsdp2 or ddp; for "
                         "DeepSpeed use --emit-deepspeed PATH")


def emit_note(advice: "Advice") -> str:
    """What the emitted config cannot say: activation checkpointing lives in the training script."""
    ckpt = advice.recommendation.checkpointing
    if ckpt is None or ckpt.value == "none":
        return ""
    if ckpt.value == "selective-op":
        how = ("torchtitan's per-op policy: torch.utils.checkpoint with context_fn="
               "create_selective_checkpoint_contexts(policy), torchtitan SelectiveAC")
    else:
        how = "e.g. Hugging Face model.gradient_checkpointing_enable()"
    return (f"; turn on {ckpt.value} activation checkpointing in the training script ({how}): a DeepSpeed config "
            "does not switch it on (its activation_checkpointing section only configures deepspeed.checkpointing)")
