"""PyTorch engines (DDP, FSDP1, FSDP2) as StageBase builders beside DeepSpeed's (zeroplan.memory.stage_base).

The ZeRO stage is the user's vocabulary; each engine maps it to what it really runs:

    deepspeed: stage s = ZeRO-s                  ddp: 0 = DDP, 1 = DDP + ZeroRedundancyOptimizer
    fsdp:  0 = NO_SHARD, 2 = SHARD_GRAD_OP, 3 = FULL_SHARD (1 has no FSDP equivalent)
    fsdp2: 2 = fully_shard(reshard_after_forward=False), 3 = reshard_after_forward=True

Results are the same StageBase/StageEstimate as DeepSpeed's, with the engine's settings as named lines.
Figures are the busiest rank's. Pure: no I/O. See docs/engines.md.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from zeroplan.errors import ZeroplanError
from zeroplan.memory.engines.ddp import ddp_buffers, ddp_settings, ddp_states
from zeroplan.memory.engines.fsdp import (
    FSDP1_STRATEGY,
    PARAM_TERMS,
    STAGING,
    fsdp1_buffers,
    fsdp1_settings,
    dim0_shard,
    flat_shard as fsdp1_shard_unit,
    fsdp1_shard,
    fsdp2_buffers,
    fsdp2_settings,
    fsdp2_shard,
    sharded_states,
    unsharded_grad,
)
from zeroplan.memory.engines.grads import (
    NO_SYNC_NOTE,
    accumulates_sharded,
    grad_settings,
    keeps_unsharded,
    no_sync_element,
    no_sync_numel,
    no_sync_term,
    reduce_element,
    with_no_sync,
)
from zeroplan.memory.engines.layout import ModelLayout, layout_for, layout_from_summary
from zeroplan.memory.engines.schedule import ddp_moments, fsdp1_moments, fsdp2_moments
from zeroplan.memory.engines.storage import torch_storage
from zeroplan.memory.optimizer_step import largest_local, temporary_term
from zeroplan.memory.recipes import Recipe
from zeroplan.memory.setup import (
    AdapterWrap,
    DeepSpeedKnobs,
    Engine,
    EngineOptions,
    OffloadDevice,
    Optimizer,
    Parallelism,
    ZeroStage,
)
from zeroplan.memory.stage import StageBase, buffer_bytes_by_phase, phase_totals
from zeroplan.memory.states import ModelStates, ModelSummary
from zeroplan.memory.terms import Phase, Setting, Term

SUPPORTED = {
    Engine.deepspeed: tuple(ZeroStage),
    Engine.ddp: (ZeroStage.zero0, ZeroStage.zero1),
    Engine.fsdp: (ZeroStage.zero0, ZeroStage.zero2, ZeroStage.zero3),
    Engine.fsdp2: (ZeroStage.zero2, ZeroStage.zero3),
    Engine.none: (ZeroStage.zero0,),
}
_NONE_WHY = "a plain training loop on one GPU shards nothing: use --engine ddp, fsdp, fsdp2 or deepspeed"
UNSUPPORTED_WHY = {
    (Engine.ddp, 2): "DDP does not shard gradients: use --engine fsdp (SHARD_GRAD_OP) or fsdp2 for stage 2",
    (Engine.ddp, 3): "DDP does not shard parameters: use --engine fsdp (FULL_SHARD) or fsdp2 for stage 3",
    (Engine.fsdp, 1): "FSDP has no optimizer-only sharding: use --engine ddp (ZeroRedundancyOptimizer) for stage 1, "
                      "or stage 2 (SHARD_GRAD_OP)",
    (Engine.fsdp2, 0): "FSDP2 always shards: use --engine ddp for stage 0",
    (Engine.fsdp2, 1): "FSDP2 has no optimizer-only sharding: use --engine ddp (ZeroRedundancyOptimizer) for stage 1",
    (Engine.none, 1): _NONE_WHY, (Engine.none, 2): _NONE_WHY, (Engine.none, 3): _NONE_WHY,
}


def supported_stages(engine: Engine) -> tuple[ZeroStage, ...]:
    """The ZeRO stages `engine` maps to something it runs, lowest first (the advisor searches only these)."""
    return SUPPORTED[Engine(engine)]


def models_offload(engine: Engine) -> bool:
    """Whether the advisor searches offload for `engine`: DeepSpeed's rungs only (FSDP's CPU offload is estimated,
    not offered: docs/engines.md)."""
    return Engine(engine) is Engine.deepspeed


OFFLOAD_SOURCE = {Engine.fsdp: "torch/distributed/fsdp/api.py: CPUOffload(offload_params=True)",
                  Engine.fsdp2: "torch/distributed/fsdp/_fully_shard/_fsdp_api.py: CPUOffloadPolicy"}


def engine_offload(engine: Engine, stage: ZeroStage, knobs: DeepSpeedKnobs) -> bool:
    """True for FSDP/FSDP2 CPU offload (parameters and optimizer both to CPU); ZeroplanError for what no engine
    option does: DDP and a plain loop have no offload, FSDP has no NVMe and no optimizer-only or parameter-only
    offload (CPUOffload moves the sharded parameters, their gradients and so the optimizer states together)."""
    opt, par = knobs.offload_optimizer, knobs.offload_param
    if (opt, par) == (OffloadDevice.none, OffloadDevice.none):
        return False
    flag = f"--offload-optimizer {opt.value} --offload-param {par.value}"
    if engine in (Engine.ddp, Engine.none):
        raise ZeroplanError(f"--engine {engine.value} has no offload ({flag}): use --engine fsdp or fsdp2 "
                            "(CPU offload) or deepspeed")
    if OffloadDevice.nvme in (opt, par):
        raise ZeroplanError(f"--engine {engine.value} has no NVMe offload ({flag}): use --engine deepspeed for NVMe")
    if opt is not par:
        raise ZeroplanError(f"--engine {engine.value} offloads parameters, gradients and optimizer states together "
                            f"(CPUOffload / CPUOffloadPolicy), not one of them ({flag}): give --offload-optimizer cpu "
                            "--offload-param cpu")
    if stage is ZeroStage.zero0:
        raise ZeroplanError(f"--engine {engine.value} CPU offload at NO_SHARD is not modelled: use stage 2 or 3")
    return True


# The engine's own name for each stage it supports; FSDP1's comes from its ShardingStrategy table.
_DDP_WORDS = {ZeroStage.zero0: "DDP", ZeroStage.zero1: "DDP + ZeroRedundancyOptimizer"}


def strategy_label(engine: Engine, stage: ZeroStage) -> str:
    """Short: 'ZeRO-3', 'FULL_SHARD', 'reshard_after_forward=True', 'DDP + ZeroRedundancyOptimizer'."""
    engine, stage = Engine(engine), ZeroStage(stage)
    check_stage(engine, stage)
    if engine is Engine.deepspeed:
        return f"ZeRO-{int(stage)}"
    if engine is Engine.ddp:
        return _DDP_WORDS[stage]
    if engine is Engine.none:
        return "no wrapper"
    if engine is Engine.fsdp:
        return FSDP1_STRATEGY[stage]
    return f"reshard_after_forward={stage is ZeroStage.zero3}"


def strategy_words(engine: Engine, stage: ZeroStage) -> str:
    """In the engine's own words, with the ZeRO stage it matches: 'FSDP FULL_SHARD (ZeRO-3 equivalent)'."""
    engine = Engine(engine)
    label = strategy_label(engine, stage)
    if engine is Engine.deepspeed:
        return label
    if engine is Engine.none:
        return "plain PyTorch on one GPU, no wrapper (ZeRO-0 equivalent)"
    if engine is Engine.fsdp2:
        label = f"FSDP2 fully_shard({label})"
    elif engine is Engine.fsdp:
        label = f"FSDP {label}"
    return f"{label} (ZeRO-{int(stage)} equivalent)"


def strategy_settings(engine: Engine, stage: ZeroStage, options: EngineOptions = EngineOptions()) -> dict:
    """The engine's own settings for `stage`, as the training script (or Accelerate) spells them; {} for DeepSpeed,
    whose settings are its zero_optimization knobs."""
    engine, stage = Engine(engine), ZeroStage(stage)
    check_stage(engine, stage)
    if engine is Engine.fsdp:
        return {"sharding_strategy": FSDP1_STRATEGY[stage]}
    if engine is Engine.fsdp2:
        return {"reshard_after_forward": stage is ZeroStage.zero3}
    if engine is Engine.none:
        return {"wrapper": "none"}
    if engine is Engine.ddp:
        return {"gradient_as_bucket_view": options.gradient_as_bucket_view,
                "zero_redundancy_optimizer": stage is ZeroStage.zero1}
    return {}


def check_stage(engine: Engine, stage: ZeroStage) -> None:
    """Raise ZeroplanError when `engine` has no equivalent of ZeRO `stage`, naming the alternative."""
    why = UNSUPPORTED_WHY.get((Engine(engine), int(stage)))
    if why:
        raise ZeroplanError(f"--engine {Engine(engine).value} has no ZeRO-{int(stage)}: {why}")


def engine_stage_base(engine: Engine | str, model: ModelSummary, layout: ModelLayout | None, recipe: Recipe,
                      stage: ZeroStage, par: Parallelism, knobs: DeepSpeedKnobs,
                      options: EngineOptions = EngineOptions(), accumulating: bool = False) -> StageBase:
    """Model states + engine buffers of the busiest rank of a PyTorch engine at `stage` (FSDP CPU offload included;
    `accumulating`: more than one micro-step per optimizer step, which FSDP's no_sync turns into whole gradients)."""
    engine = Engine(engine)
    check_stage(engine, stage)
    check_engine_options(engine, options)
    layout = layout or layout_from_summary(model)
    store, dp, mixed = torch_storage(recipe), par.dp, recipe.has_master
    notes: tuple[str, ...] = ()
    offload = engine_offload(engine, stage, knobs)
    if engine is Engine.none:
        if dp > 1:
            raise ZeroplanError(f"--engine none is one GPU without a data-parallel wrapper, not {dp} GPUs: give --gpus 1, "
                                "or --engine ddp, fsdp, fsdp2 or deepspeed for data parallelism")
        states, _ = ddp_states(model.num_params, layout, store, stage, dp)
        buffers, settings = (), (Setting("wrapper", "none: model(batch).backward(); optimizer.step()",
                                         "a plain PyTorch training loop"),)
        moments = ddp_moments(layout, states, store, 0, EngineOptions())
    elif engine is Engine.ddp:
        states, notes = ddp_states(model.num_params, layout, store, stage, dp)
        buffers, settings = ddp_buffers(model.num_params, store, options), ddp_settings(stage, options)
        moments = ddp_moments(layout, states, store, sum(t.bytes for t in buffers), options)
    elif engine is Engine.fsdp:
        states = sharded_states(fsdp1_shard(layout, stage, dp), store)
        buffers = fsdp1_buffers(layout, stage, dp, store, mixed) + _grad_term(layout, stage, dp, store)
        settings = fsdp1_settings(stage, dp, mixed, layout)
    else:
        states = sharded_states(fsdp2_shard(layout, dp), store)
        buffers = fsdp2_buffers(layout, stage, dp, store, options.float8_all_gather) + (unsharded_grad(layout, dp, store),)
        settings = fsdp2_settings(stage, mixed, layout)
    if options.float8_all_gather:
        settings += (Setting("float8 all-gather", "Float8LinearConfig(enable_fsdp_float8_all_gather=True): the blocks' "
                             "linear weights gathered in float8", "torchao==0.18.0:float8/fsdp_utils.py"),)
    cpu_terms: tuple[Term, ...] = ()
    if offload:
        cpu_terms = (Term("CPU offload: sharded parameters, gradients, optimizer states", states.total,
                          source=OFFLOAD_SOURCE[engine]),)
        copy = offload_copy(layout, engine, dp, store, mixed)
        states = ModelStates(parameters=0, gradients=0, optimizer_states=0, cpu_bytes=states.total)
        buffers += (Term(OFFLOAD_COPY, copy, Phase.backward, OFFLOAD_SOURCE[engine] + ": the shard copied to the GPU "
                         "for its all-gather"),) if copy else ()
        settings += (Setting("cpu_offload", "CPUOffload(offload_params=True)" if engine is Engine.fsdp
                             else "offload_policy=CPUOffloadPolicy()", OFFLOAD_SOURCE[engine]),)
        notes += ("CPU offload: the optimizer step runs on the CPU over the sharded fp32 parameters; the GPU holds "
                  "gathered units, a unit's unsharded gradient and the shard being copied in (docs/engines.md)",)
    if engine is Engine.fsdp:
        moments = fsdp1_moments(layout, states, store, stage, dp, mixed, offload, copy if offload else 0)
    elif engine is Engine.fsdp2:
        moments = fsdp2_moments(layout, states, store, stage, dp, sum(t.bytes for t in buffers if t.name == STAGING),
                                offload, copy if offload else 0, reduce_element(store, options), options.float8_all_gather)
    no_sync = keeps_unsharded(engine, stage, dp, accumulating, options)
    if engine in (Engine.fsdp, Engine.fsdp2):
        settings += grad_settings(engine, options, no_sync)
    if accumulates_sharded(engine, stage, dp, accumulating) and not no_sync:
        notes += (NO_SYNC_NOTE,)
    if no_sync:
        kept = no_sync_term(no_sync_numel(engine, layout.unit_numels, dp), no_sync_element(engine, store, options))
        buffers += (kept,)
        moments = with_no_sync(moments, kept.bytes)
    for temp in step_temporary(recipe, engine, layout, stage, dp, states):
        buffers += (temp,)
        moments = moments[:-1] + (replace(moments[-1], temporaries=temp.bytes),)
    if not layout.exact_shapes and engine is not Engine.deepspeed:
        notes += ("tensor shapes unknown for part of the model: read as flat tensors (FSDP2 dim-0 padding and "
                  "ZeroRedundancyOptimizer's partition approximate)",)
    backward, step = phase_totals(states, buffers)
    return StageBase(stage=stage, knobs=knobs, states=states, buffers=buffers, buffer_bytes=buffer_bytes_by_phase(buffers),
                     cpu_terms=cpu_terms, gpus=par.gpus, gpus_per_node=par.gpus_per_node, backward_bytes=backward,
                     step_bytes=step, nvme_bytes_per_node=0, engine=engine.value, settings=settings, notes=notes,
                     moments=moments, moment_layers=layout.num_blocks)


OFFLOAD_COPY = "CPU shard copied to the GPU (CPU offload)"
ADAMW_TEMPORARY = "AdamW "  # the name every AdamW step temporary starts with (memory.optimizer_step.TERM_NAME)


def step_temporary(recipe: Recipe, engine: Engine, layout: ModelLayout, stage: ZeroStage, dp: int,
                   states: ModelStates) -> tuple[Term, ...]:
    """AdamW's step temporary on the GPU (memory.optimizer_step): the group is every tensor the rank steps, one of
    AdamW's two states over its shard (optimizer states / 2); the largest tensor that group's largest shard.
    Measured for foreach (validation/measure_engines.py, AdamW(foreach=True) on CPU)."""
    group = states.optimizer_states // 2
    if engine is Engine.fsdp:
        shards = [u if stage is ZeroStage.zero0 or dp == 1 else fsdp1_shard_unit(u, dp) for u in layout.unit_numels]
        largest, total = largest_local((), engine, dp, shards), sum(shards)
    elif engine is Engine.fsdp2:
        largest, total = largest_local(layout.tensors(), engine, dp), fsdp2_shard(layout, dp)
    else:
        largest, total = largest_local(layout.tensors(), engine, dp), sum(prod(s) for s in layout.tensors())
    return temporary_term(recipe, engine, group, group * largest // max(1, total))


def adamw_foreach_temporary(recipe: Recipe, states: ModelStates) -> int:
    """One AdamW state over the rank's shard: foreach's whole-group temporary (memory.optimizer_step)."""
    return states.optimizer_states // 2 if recipe.optimizer is Optimizer.adamw else 0


def offload_copy(layout: ModelLayout, engine: Engine, dp: int, store, mixed: bool) -> int:
    """The largest unit's shard on the GPU while it is gathered: FSDP1 copies the CPU shard in (its _mp_shard,
    already counted, when mixed), FSDP2 its all-gather input; compute-dtype bytes when mixed, else fp32."""
    if engine is Engine.fsdp:
        return 0 if mixed else max(fsdp1_shard_unit(u, dp) for u in layout.unit_numels) * store.param
    units = [layout.root] + ([layout.block] if layout.num_blocks else [])
    return max(sum(dim0_shard(s, dp) for s in unit) for unit in units) * (store.compute if mixed else store.param)


def check_engine_options(engine: Engine, options: EngineOptions) -> None:
    """ZeroplanError for an engine option the engine does not have (so it never changes nothing in silence)."""
    engine = Engine(engine)
    if options.reduce_dtype is not None and engine is not Engine.fsdp2:
        raise ZeroplanError(f"--reduce-dtype {options.reduce_dtype.value} is modelled for --engine fsdp2 "
                            f"(MixedPrecisionPolicy.reduce_dtype), not --engine {engine.value}")
    if options.no_sync and engine not in (Engine.fsdp, Engine.fsdp2):
        raise ZeroplanError(f"--no-sync is FSDP's (gradient accumulation without reduce-scatter), not --engine "
                            f"{engine.value}'s")
    if options.float8_all_gather and engine is not Engine.fsdp2:
        raise ZeroplanError(f"--float8-all-gather is FSDP2's (torchao's fsdp_pre_all_gather hook), not --engine "
                            f"{engine.value}'s")
    if options.adapter_wrap is AdapterWrap.block and engine is not Engine.fsdp:
        raise ZeroplanError(f"--adapter-wrap block is FSDP1's wrapping of LoRA adapters (--engine fsdp), not "
                            f"--engine {engine.value}'s")


def _grad_term(layout: ModelLayout, stage: ZeroStage, dp: int, store) -> tuple:
    return () if stage is ZeroStage.zero0 or dp == 1 else (unsharded_grad(layout, dp, store),)


def param_peak_bytes(base: StageBase) -> int:
    """Parameter bytes at their peak in forward/backward: persistent parameters + the gathered/staging lines."""
    return base.states.parameters + sum(t.bytes for t in base.buffers if t.name.startswith(PARAM_TERMS))


__all__ = ["ModelLayout", "check_engine_options", "check_stage", "engine_stage_base", "layout_for", "layout_from_summary",
           "models_offload", "param_peak_bytes", "strategy_label", "strategy_settings", "strategy_words",
           "supported_stages", "EngineOptions"]
