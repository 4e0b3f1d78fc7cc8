"""Gradient bytes FSDP holds beyond each rank's shard: what no_sync keeps during gradient accumulation, the dtype
of the reduce-scatter, and the whole-unit gradient of an FSDP1 unit that mixes frozen and trainable parameters.

- no_sync. FSDP1 `FullyShardedDataParallel.no_sync()` makes `_post_backward_hook` return before its reduce-scatter
  (torch/distributed/fsdp/_runtime_utils.py: `if not state._sync_gradients`), so each FlatParameter keeps its whole
  unsharded gradient; FSDP2 `set_requires_gradient_sync(False)` keeps each parameter's
  (_fully_shard/_fsdp_param.py: `unsharded_accumulated_grad`, cast to reduce_dtype when one is set). Accelerate's
  `accumulate()` enters it on every micro-step but the last unless `sync_each_batch` (accelerate==1.16.0:
  accelerator.py, `no_sync`: FSDP1 `model.no_sync`, FSDP2 `set_requires_gradient_sync(False)`), as do HF Trainer and
  Lightning Fabric's `no_backward_sync` (litgpt's finetune scripts). So from the first micro-step's backward to the
  last one's, every gradient-carrying unit's gradient is whole: sum of units x e, e = the param dtype (FSDP1, also
  under MixedPrecision) or reduce_dtype (FSDP2). Measured: validation/measure_fsdp_grads.py.
- reduce dtype. FSDP2 allocates the reduce-scatter input in reduce_dtype (_fully_shard/_fsdp_collectives.py,
  `foreach_reduce`: `reduce_scatter_comm.allocate(..., dtype=reduce_dtype)`), so fp32 (torchtitan's default,
  torchtitan@6404b932421f5ce382e7dac5ad381b2c17b1373c:torchtitan/config/job_config.py,
  `mixed_precision_reduce: Literal["float32"] = "float32"`) doubles the kept reduce-scatter input of a unit beside
  its bf16 gradient.
- An FSDP1 unit with frozen and trainable parameters needs `use_orig_params=True` (torch/distributed/fsdp/
  _flat_param.py: "Must flatten tensors with uniform `requires_grad` when `use_orig_params=False`") and then its
  FlatParameter requires grad as a whole: the unit's gradient covers the frozen parameters too.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.memory.engines.storage import Storage
from zeroplan.memory.recipes import FP32_BYTES
from zeroplan.memory.setup import Engine, EngineOptions, ReduceDtype, ZeroStage
from zeroplan.memory.terms import Phase, Setting, Term, shard_numel

NO_SYNC = "no_sync: whole gradients kept (gradient accumulation)"
NO_SYNC_SOURCE = ("torch/distributed/fsdp/_runtime_utils.py: _post_backward_hook (FSDP1 no_sync); "
                  "_fully_shard/_fsdp_param.py: unsharded_accumulated_grad (FSDP2); accelerate accumulate()")
REDUCE_SOURCE = "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce, reduce_scatter_input"
NO_SYNC_NOTE = ("gradient accumulation: a reduce-scatter every micro-step assumed (torchtitan's loop); Accelerate, HF "
                "Trainer and Lightning skip it under no_sync and keep whole gradients until the last micro-step: give "
                "--no-sync for them (docs/engines.md)")
BF16_BYTES = 2
REDUCE_BYTES = {ReduceDtype.fp32: FP32_BYTES, ReduceDtype.bf16: BF16_BYTES}


def reduce_element(store: Storage, options: EngineOptions) -> int:
    """Bytes per element of FSDP2's reduce-scatter input: reduce_dtype's, or the param dtype's when unset."""
    return REDUCE_BYTES[options.reduce_dtype] if options.reduce_dtype else store.compute


def keeps_unsharded(engine: Engine, stage: ZeroStage, dp: int, accumulating: bool, options: EngineOptions) -> bool:
    """Whether gradient accumulation under no_sync keeps whole gradients: a sharded FSDP stage on more than one
    rank, more than one micro-step, and the reduce-scatter skipped on all but the last (--no-sync)."""
    return accumulates_sharded(engine, stage, dp, accumulating) and options.no_sync


def accumulates_sharded(engine: Engine, stage: ZeroStage, dp: int, accumulating: bool) -> bool:
    """More than one micro-step on a sharded FSDP stage of more than one rank: where no_sync would matter."""
    sharded = dp > 1 and (engine is Engine.fsdp2 or (engine is Engine.fsdp and stage is not ZeroStage.zero0))
    return sharded and accumulating


def no_sync_element(engine: Engine, store: Storage, options: EngineOptions) -> int:
    """FSDP1 keeps the unsharded gradient in the param dtype (measured bf16 under MixedPrecision too); FSDP2 in
    reduce_dtype when set, else param_dtype."""
    return reduce_element(store, options) if engine is Engine.fsdp2 else store.compute


def no_sync_numel(engine: Engine, units: list[int] | tuple[int, ...], dp: int) -> int:
    """Elements of the whole gradients no_sync keeps: FSDP1 each gradient-carrying FlatParameter's padded unsharded
    size (ceil(unit / N) x N, measured), FSDP2 each parameter's unsharded size (no padding)."""
    if engine is Engine.fsdp:
        return sum(shard_numel(u, dp) * dp for u in units)
    return sum(units)


def no_sync_term(grad_numel: int, element: int) -> Term:
    """U = the whole gradients' elements (no_sync_numel) x e."""
    return Term(NO_SYNC, grad_numel * element, Phase.backward, NO_SYNC_SOURCE)


def with_no_sync(moments: tuple, kept: int) -> tuple:
    """Moments of an accumulating step under no_sync: `kept` (the whole gradients U, when not already among the
    buffers) in every event before the step, and no accumulated shards beside them. The last micro-step turns each
    unit's whole gradient into its shard as it reduces it (a shard is at most the unit's bytes on two or more
    ranks), so U alone is exact up to the forward's end and an upper bound through the last backward."""
    return tuple(m if m.phase == "step" else replace(m, grads_accumulated=0, buffers=m.buffers + kept)
                 for m in moments)


def fsdp_tuned_moments(base, layers: int) -> tuple:
    """A fine-tune's FSDP step under no_sync: DeepSpeed's phase rule (memory.timeline.deepspeed_skeleton: model
    states throughout, buffers by phase, the no_sync term among the backward-phase ones) with FSDP's gradients: no
    shards before the step (U stands for them, as in with_no_sync)."""
    from zeroplan.memory.timeline import deepspeed_skeleton

    moments = tuple(replace(m, gradients=0) if m.phase in ("start", "forward") else m
                    for m in deepspeed_skeleton(base, layers))
    return with_no_sync(moments, 0)


def grad_settings(engine: Engine, options: EngineOptions, no_sync: bool) -> tuple[Setting, ...]:
    """The settings these terms assumed, as lines of the engine table."""
    out = []
    if engine is Engine.fsdp2 and options.reduce_dtype:
        out.append(Setting("reduce_dtype", f"MixedPrecisionPolicy(reduce_dtype={options.reduce_dtype.value})",
                           REDUCE_SOURCE))
    if no_sync:
        out.append(Setting("gradient accumulation", "no_sync on all but the last micro-step (--no-sync)",
                           NO_SYNC_SOURCE))
    return tuple(out)
