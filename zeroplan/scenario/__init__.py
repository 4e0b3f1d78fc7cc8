"""From what a user typed (ScenarioArgs, scenario/args.py) to a Scenario, and the estimates it answers: resolve the
model and hardware, build the training setup and DeepSpeed knobs, read a --deepspeed-config, call the calculator.

Shared by the CLI, the checks and the Python API. Raises ZeroplanError for bad input; never prints or exits.
"""

from __future__ import annotations

from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from zeroplan.errors import SpecError, UsageError, ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.estimate import Scenario, overheads_for
from zeroplan.memory.summary import small_param_numel, summarize_model
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    Engine,
    Parallelism,
    TrainingLoop,
    TrainingSetup,
    ZeroStage,
    parse_checkpointing,
    spread_gpus,
)
from zeroplan.memory.states import ModelSummary
from zeroplan.models.architecture import Architecture
from zeroplan.models.presets import load_model, model_facts
from zeroplan.scenario.args import KNOB_OPTIONS, ScenarioArgs  # the package's names: what a caller fills
from zeroplan.scenario.fromfiles import deepspeed_from, litgpt_head
from zeroplan.units import parse_count
from zeroplan.validate import validated

if TYPE_CHECKING:  # imported where used: `estimate` never loads the DeepSpeed-config code
    from zeroplan.deepspeed.reader import DeepSpeedConfig
    from zeroplan.deepspeed.source import DeepSpeedSource
    from zeroplan.frameworks.apply import FromFile


def resolve_model(model: str | None, params: str | None, largest_layer: str | None,
                  knobs: DeepSpeedKnobs) -> tuple[ModelSummary, Architecture | None]:
    """A ModelSummary (and the architecture, when known) from --model or --params."""
    if model and params:
        raise ZeroplanError("give either --model or --params, not both")
    if not model and not params:
        raise ZeroplanError("give --model NAME|PATH or --params N (e.g. --params 9e9)")
    override = parse_count(largest_layer, "--largest-layer", suffixes=True) if largest_layer else None
    if params:
        num = parse_count(params, "--params", suffixes=True)
        if override is not None and override > num:
            raise ZeroplanError(f"--largest-layer ({override:,}) is larger than --params ({num:,})")
        # A bare count is taken as dense: every parameter is active.
        summary = ModelSummary(name=f"{num / 1e9:g}B params", num_params=num, largest_layer_params=override or 0,
                               num_active_params=num)
        return summary, None
    name, counts, arch = model_facts(model)
    summary = summarize_model(name, counts, arch, knobs)
    if override is not None:
        summary = replace(summary, largest_layer_params=override)
    return summary, arch


def parallelism_from(gpus: str, nodes: str | None, hw: HardwareSpec | None) -> Parallelism:
    count = parse_count(nodes, "--nodes") if nodes is not None else None
    return spread_gpus(parse_count(gpus, "--gpus"), count, hw.gpus_per_node if hw else None, hw.name if hw else "")


def _stages(stage: int | None) -> tuple[ZeroStage, ...]:
    return tuple(ZeroStage) if stage is None else (ZeroStage(stage),)


def knobs_from(args: ScenarioArgs, base: DeepSpeedKnobs | None = None) -> DeepSpeedKnobs:
    """The knobs the command line gives, over `base` (a DeepSpeed config's knobs) or DeepSpeed's defaults."""
    values = {field: parse_count(getattr(args, opt), "--" + opt.replace("_", "-"))
              for opt, field in KNOB_OPTIONS.items() if getattr(args, opt) is not None}
    if args.overlap_comm is not None:
        values["overlap_comm"] = args.overlap_comm
    for opt in ("offload_optimizer", "offload_param"):
        if base is None or opt in args.given:
            values[opt] = getattr(args, opt)
    return validated(DeepSpeedKnobs, {**(asdict(base) if base else {}), **values})


def _fraction(value: float | None, what: str, upper: float) -> float | None:
    if value is not None and not 0 <= value <= upper:  # also rejects NaN
        raise ZeroplanError(f"{what} {value} must be between 0 and {upper:g}")
    return value


def setup_from(args: ScenarioArgs) -> TrainingSetup:
    checkpointing, every = parse_checkpointing(args.checkpointing)
    if getattr(args.float8, "value", args.float8) != "none" and (
            args.lora_rank or args.adapter_config or args.qlora or args.load_in_8bit or args.freeze):
        raise ZeroplanError("--float8: modelled for full training (torchtitan's float8 converter), not with LoRA, "
                            "QLoRA, an 8-bit base or --freeze")
    return validated(TrainingSetup, dict(
        precision=args.precision, optimizer=args.optimizer, fp32_grad_accum=args.fp32_grad_accum,
        optimizer_impl=args.optimizer_impl,
        seq_len=parse_count(args.seq_len, "--seq-len"), micro_batch=parse_count(args.micro_batch, "--micro-batch"),
        grad_accum=parse_count(args.grad_accum, "--grad-accum"), checkpointing=checkpointing, attention=args.attention,
        checkpoint_every=every, loss=args.loss, post_training=args.post_training, compile=args.compile, float8=args.float8,
        training_loop=TrainingLoop.of(args.training_loop, args.qlora, args.qlora_stack),
    ))


def hardware_from(ref: str) -> HardwareSpec | None:
    return None if ref == "none" else load_hardware(ref)


def needs_hardware(scn: Scenario, command: str) -> Scenario:
    """`scn`, or ZeroplanError when `command` has no hardware profile to answer with."""
    if scn.hardware is None:
        raise ZeroplanError(f"{command} needs a hardware profile: pass --hardware NAME")
    return scn


def scenario(args: ScenarioArgs) -> Scenario:
    """Resolve presets and parse every number of one planned run."""
    return scenario_and_config(args)[0]


def from_framework(args: ScenarioArgs) -> tuple[ScenarioArgs, FromFile | None]:
    """`args` with what the --from file sets where the command line left the default (None: no --from file)."""
    if not args.from_file:
        if args.from_kind:
            raise UsageError("--from-kind names the kind of a --from file: give --from FILE")
        return args, None
    from zeroplan.frameworks.apply import apply_runs
    from zeroplan.frameworks.kinds import FromKind
    from zeroplan.frameworks.source import read_framework_file

    paths = (args.from_file,) if isinstance(args.from_file, str) else tuple(args.from_file)
    if not args.from_kind:
        args, paths = deepspeed_from(args, paths)
        if not paths:
            return args, None
    if args.from_kind and len(paths) > 1:
        raise UsageError("--from-kind names the kind of one --from file: give it with one --from")
    kind = FromKind(args.from_kind) if args.from_kind else None
    runs = tuple(read_framework_file(Path(path), kind) for path in paths)
    for option, line in (ask for run in runs for ask in run.asks):
        if option not in args.given:
            raise SpecError(line)
    found = apply_runs(runs, args.given, frozenset(f.name for f in fields(ScenarioArgs)))
    applied = replace(args, **found.updates, from_file=None, from_kind=None, given=args.given | found.stated)
    return applied, found


def scenario_and_config(args: ScenarioArgs) -> tuple[Scenario, DeepSpeedConfig | None]:
    """The run, and the --deepspeed-config it reads (None without one)."""
    scn, config, _ = scenario_config_and_file(args)
    return scn, config


def scenario_config_and_file(args: ScenarioArgs) -> tuple[Scenario, DeepSpeedConfig | None, FromFile | None]:
    """The run, the DeepSpeed config it reads (--deepspeed-config or the --from file's), and the --from file applied.
    An FP8 block-scaled checkpoint's config.json is read here, its stored bytes counted by the tuning (a LoRA on it)."""
    from zeroplan.models.presets import FP8_BASE_COUNTED

    token = FP8_BASE_COUNTED.set(True)
    try:
        return _scenario_config_and_file(args)
    finally:
        FP8_BASE_COUNTED.reset(token)


def _scenario_config_and_file(args: ScenarioArgs) -> tuple[Scenario, DeepSpeedConfig | None, FromFile | None]:
    args, found = from_framework(args)
    hw = hardware_from(args.hardware)
    par = parallelism_from(args.gpus, args.nodes, hw)
    knobs = knobs_from(args)
    summary, arch = model_of(args, found, knobs)
    litgpt_head(found, arch)
    setup, config, mesh = setup_from(args), None, None
    if (source := deepspeed_source(args, found)) is not None:
        from zeroplan.deepspeed.parallel import config_mesh

        mesh = config_mesh(source.data, source.origin, par.gpus)  # AutoTP: a tensor-parallel mesh, never dp
        config, setup = _with_config(args, arch, mesh.dp if mesh else par.dp, setup, source)
        if mesh is not None and mesh.pipe_partition:  # PipelineEngine: its ZeRO stages, its checkpoint interval
            from zeroplan.deepspeed.parallel import with_pipeline_checkpointing
            from zeroplan.memory.pipeengine import pipe_zero_refusal

            if problem := pipe_zero_refusal(int(config.stage), mesh.pp):
                raise SpecError(f"{source.origin}: {problem}")
            setup = with_pipeline_checkpointing(source.data, setup, args.given)
        knobs = knobs_from(args, config.knobs)
        summary = replace(summary, small_param_numel=small_param_numel(arch, knobs))
    overheads = overheads_for(hw, _fraction(args.fragmentation, "--fragmentation", 1.0),
                              _fraction(args.cuda_context_gib, "--cuda-context-gib", 1024.0),
                              _fraction(args.nccl_gib, "--nccl-gib", 1024.0))
    if args.calibration:
        overheads = calibrated_overheads(overheads, args.calibration, hw, args.given)
    from zeroplan.scenario.finetune import tuning_of
    from zeroplan.scenario.teacher import teacher_of

    scn = Scenario(model=summary, arch=arch, setup=setup, parallelism=par, knobs=knobs, hardware=hw, overheads=overheads,
                   engine=args.engine, layout=layout_of(args.model, args.engine), tuning=tuning_of(args, args.model, hw),
                   engine_options=engine_options_of(args), teacher=teacher_of(args.teacher))
    if mesh is not None or (found is not None and (found.run.get("tp") or found.run.get("cp"))):  # a mesh only
        from zeroplan.scenario.meshed import file_mesh, with_mesh

        scn = with_mesh(scn, file_mesh(found, mesh, par.gpus), args.model)
    return scn, config, found


def calibrated_overheads(overheads, path: str, hw, typed: frozenset[str]):
    """The overheads with a calibration file applied (zeroplan.calibration.file; docs/calibrate.md)."""
    from zeroplan.calibration.file import calibrated, load_calibration

    if hw is None or overheads is None:
        raise SpecError(f"{path}: a calibration refines a hardware profile; this run has none (--hardware none)")
    return calibrated(overheads, load_calibration(path), hw.name, typed)


def model_of(args: ScenarioArgs, found: FromFile | None,
              knobs: DeepSpeedKnobs) -> tuple[ModelSummary, Architecture | None]:  # fmt: skip
    """resolve_model, its errors naming the --from file's key when the model came from there."""
    if found is None:
        return resolve_model(args.model, args.params, args.largest_layer, knobs)
    origin = found.run.origin
    if not args.model and not args.params:
        raise SpecError(f"{origin}: names no model; give --model NAME|PATH or --params N (e.g. --params 9e9)")
    try:
        return resolve_model(args.model, args.params, args.largest_layer, knobs)
    except ZeroplanError as exc:
        if found.model_key is None:
            raise
        raise SpecError(f"{origin}: {found.model_key}: {exc}") from None


def deepspeed_source(args: ScenarioArgs, found: FromFile | None) -> DeepSpeedSource | None:
    """--deepspeed-config, else the --from file's inline block."""
    if not args.deepspeed_config and (found is None or found.deepspeed is None):
        return None
    from zeroplan.deepspeed.source import DeepSpeedSource, read_deepspeed_config

    if args.deepspeed_config:
        source = read_deepspeed_config(Path(args.deepspeed_config))
    else:
        source = DeepSpeedSource(found.deepspeed, found.deepspeed_origin)
    return source  # its AutoTP mesh, or a refusal of what is not modelled: deepspeed.parallel.config_mesh


def engine_options_of(args: ScenarioArgs):
    """The PyTorch engine settings typed (--reduce-dtype, --no-sync, --adapter-wrap), each refused in one line
    by an engine that does not have it (memory.engines.check_engine_options)."""
    from zeroplan.memory.engines import check_engine_options
    from zeroplan.memory.float8 import check_float8_all_gather
    from zeroplan.memory.setup import AdapterWrap, EngineOptions

    options = validated(EngineOptions, {"reduce_dtype": args.reduce_dtype, "no_sync": args.no_sync,
                                        "adapter_wrap": args.adapter_wrap, "float8_all_gather": args.float8_all_gather})
    check_engine_options(args.engine, options)
    check_float8_all_gather(options, args.float8)
    if options.adapter_wrap is AdapterWrap.block and not (args.lora_rank or args.adapter_config):
        raise SpecError("--adapter-wrap block says where FSDP1 puts LoRA adapters: give --lora-rank R or --adapter-config")
    return options


def layout_of(model: str | None, engine: Engine):
    """The wrapping units and tensor shapes of a --model, for the PyTorch engines (None otherwise)."""
    if engine is Engine.deepspeed or not model:
        return None
    from zeroplan.memory.engines import layout_for

    return layout_for(load_model(model))


def engine_stages(engine: Engine, stage: int | None, offload: bool = False) -> tuple[ZeroStage, ...]:
    """The stages to estimate: `stage` (if the engine has it) or every stage the engine maps (with CPU offload
    asked of FSDP, its sharded stages: CPU offload at NO_SHARD is not modelled)."""
    if engine is Engine.deepspeed:  # every stage; the engines package loads only for the PyTorch engines
        return tuple(ZeroStage) if stage is None else (ZeroStage(stage),)
    from zeroplan.memory.engines import check_stage, supported_stages

    if stage is None:
        stages = supported_stages(engine)
        if offload and engine is Engine.fsdp:
            return tuple(s for s in stages if s is not ZeroStage.zero0)
        return stages
    check_stage(engine, ZeroStage(stage))
    return (ZeroStage(stage),)


def _with_config(args: ScenarioArgs, arch: Architecture | None, dp: int, setup: TrainingSetup,
                 ds: DeepSpeedSource) -> tuple[DeepSpeedConfig, TrainingSetup]:  # fmt: skip
    """The config's batch and precision fill what the command line leaves at its defaults; its "auto" values resolve to the result.

    Read twice: first for what the file pins, then with the setup that makes, so its "auto" values take the
    run's values. The precision the second reading gives (fp16/bf16 "auto" filled, a section Accelerate adds)
    is the one the estimate uses, unless --precision overrides it. A removed block is refused, as DeepSpeed does.
    """
    from zeroplan.deepspeed.optimizer import not_modelled, optimizer_of

    hidden = arch.hidden_size if arch else None
    pinned = ds.parse(hidden_size=hidden, dp_world=dp).setup_fields(dp)
    if (optimizer := optimizer_of(ds.data)) is not None:
        pinned["optimizer"] = optimizer  # the recipe optimizer.type builds, unless --optimizer is typed
    # validated, not replaced: the file's micro-batch is held to the bounds a typed one is (docs/hardening.md)
    setup = validated(TrainingSetup, {**{f.name: getattr(setup, f.name) for f in fields(setup)},
                                      **{k: v for k, v in pinned.items() if k not in args.given}},
                      getattr(ds, "origin", "DeepSpeed config"))
    assumed = frozenset(f for f in ("precision", "micro_batch", "grad_accum") if f not in args.given and f not in pinned)
    config = ds.parse(hidden_size=hidden, dp_world=dp, setup=setup, assumed=assumed)
    if config.removed_keys:
        raise SpecError(f"{config.origin}: " + "; ".join(removed.message for removed in config.removed_keys))
    if problems := not_modelled(ds.data, args.given):
        raise SpecError(f"{config.origin}: " + "; ".join(problems))
    resolved = config.setup_fields(dp)
    return config, replace(setup, **{k: resolved[k] for k in ("precision", "fp32_grad_accum") if k not in args.given})
