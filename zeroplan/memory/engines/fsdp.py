"""FSDP1 (FullyShardedDataParallel, flat parameters) and FSDP2 (fully_shard, per-parameter) per rank.

Sources (PyTorch 2.13): torch/distributed/fsdp/_flat_param.py (one FlatParameter per wrapped unit, padded to a
multiple of the world size; `_full_param_padded` gathered, `_mp_shard` the low-precision shard), _runtime_utils.py
(the root is not resharded after forward; SHARD_GRAD_OP keeps every unit gathered from its forward to its
backward; BACKWARD_PRE prefetches the next unit), _fully_shard/_fsdp_param.py (dim-0 sharding, padded to a
multiple of the world size), _fsdp_param_group.py (the last all-gather's output is kept in
`comm_ctx.all_gather_state` until the next one). Gathered terms checked against measured runs
(validation/measure_engines.py, docs/engines.md). Pure: no I/O.
"""

from __future__ import annotations

from math import prod

from zeroplan.memory.engines.layout import ModelLayout, Shape
from zeroplan.memory.engines.storage import Storage
from zeroplan.memory.float8 import FLOAT8_BYTES, SCALE_BYTES, is_float8_weight
from zeroplan.memory.setup import ZeroStage
from zeroplan.memory.states import ModelStates
from zeroplan.memory.terms import Phase, Setting, Term, shard_numel

FSDP1_SOURCE = "torch/distributed/fsdp/_flat_param.py, _runtime_utils.py"
FSDP2_SOURCE = "torch/distributed/fsdp/_fully_shard/_fsdp_param.py, _fsdp_param_group.py"
GATHERED = "gathered parameters"  # the transient full parameters; validation compares these with the measured peak
STAGING = "all-gather staging buffer"
MP_SHARD = "mixed-precision shard"
PARAM_TERMS = (GATHERED, STAGING, MP_SHARD)
PREFETCHED_BLOCKS = 2  # the block being run and the one BACKWARD_PRE (FSDP1) prefetches

FSDP1_STRATEGY = {ZeroStage.zero0: "NO_SHARD", ZeroStage.zero2: "SHARD_GRAD_OP", ZeroStage.zero3: "FULL_SHARD"}


def flat_shard(numel: int, dp: int) -> int:
    """FSDP1: a FlatParameter of numel elements padded to a multiple of dp, ceil(numel / dp) per rank."""
    return shard_numel(numel, dp)


def dim0_shard(shape: Shape, dp: int) -> int:
    """FSDP2: a tensor sharded on dim 0, padded to a multiple of dp rows: ceil(rows / dp) x (numel / rows)."""
    rows = shape[0]
    return shard_numel(rows, dp) * (prod(shape) // rows)


def sharded_states(shard: int, store: Storage) -> ModelStates:
    """Parameters, gradients and optimizer states are all sharded between steps (FSDP SHARD_GRAD_OP and FULL_SHARD alike)."""
    return ModelStates(parameters=shard * store.param, gradients=shard * store.grad, optimizer_states=shard * store.optimizer)


def fsdp1_shard(layout: ModelLayout, stage: ZeroStage, dp: int) -> int:
    """Elements one rank holds: sum over units of ceil(unit / dp); NO_SHARD (or one rank) keeps the whole model."""
    if stage is ZeroStage.zero0 or dp == 1:
        return sum(layout.unit_numels)
    return sum(flat_shard(u, dp) for u in layout.unit_numels)


def unit_bytes(shapes, dp: int, c: int, float8: bool = False, shard: bool = False) -> int:
    """A unit's padded unsharded bytes (its shard's, `shard`): c per element; with `float8` (--float8-all-gather, a
    block's tensors) a linear's weight is all-gathered in float8, 1 B per element, with its fp32 scale (torchao==0.18.0
    float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather: (float8 data,), (scale,))."""
    def one(s: Shape) -> int:
        rows = dim0_shard(s, dp) * (1 if shard else dp)
        return rows * FLOAT8_BYTES + SCALE_BYTES if float8 and is_float8_weight(s) else rows * c
    return sum(one(s) for s in shapes)


def fsdp2_shard(layout: ModelLayout, dp: int) -> int:
    return sum(dim0_shard(s, dp) for s in layout.tensors())


def _padded(numel: int, dp: int) -> int:
    return flat_shard(numel, dp) * dp


def fsdp1_buffers(layout: ModelLayout, stage: ZeroStage, dp: int, store: Storage, mixed: bool) -> tuple[Term, ...]:
    """Gathered units in the forward/backward and the low-precision shard they are gathered from.

    SHARD_GRAD_OP: every unit stays gathered from its forward to its backward: sum of padded units x c.
    FULL_SHARD: the root (never resharded after forward) + 2 blocks (BACKWARD_PRE prefetch) x c.
    Mixed precision adds the `_mp_shard` of the unit being gathered (largest unit / dp x c); NO_SHARD keeps a
    whole low-precision copy of the model from forward to backward instead.
    """
    units = layout.unit_numels
    if stage is ZeroStage.zero0 or dp == 1:
        if not mixed:
            return ()
        live = units[0] + sum(units[1:1 + PREFETCHED_BLOCKS])  # measured: root + 2 blocks, as FULL_SHARD
        return (Term(MP_SHARD + " (NO_SHARD: root + 2 blocks)", live * store.compute, Phase.backward,
                     FSDP1_SOURCE + ": _mp_shard"),)
    if stage is ZeroStage.zero2:
        gathered, how = sum(_padded(u, dp) for u in units), "every unit from its forward to its backward"
    else:
        blocks = units[1:1 + PREFETCHED_BLOCKS]
        gathered, how = _padded(units[0], dp) + sum(_padded(b, dp) for b in blocks), "root + 2 blocks (BACKWARD_PRE)"
    terms = [Term(f"{GATHERED} ({how})", gathered * store.compute, Phase.backward, FSDP1_SOURCE + ": _full_param_padded")]
    if mixed:
        terms.append(Term(MP_SHARD, max(flat_shard(u, dp) for u in units) * store.compute, Phase.backward,
                          FSDP1_SOURCE + ": _mp_shard of the unit being gathered"))
    return tuple(terms)


def fsdp2_buffers(layout: ModelLayout, stage: ZeroStage, dp: int, store: Storage, float8: bool = False) -> tuple[Term, ...]:
    """Unsharded parameters in the forward/backward and the all-gather output FSDP2 keeps for its last all-gather.

    reshard_after_forward=False (stage 2): every unit unsharded (padded, x c) + one block's staging output.
    reshard_after_forward=True (stage 3): root (kept unsharded, as FSDP1) + one block + max(root, block) staging:
    the root's all-gather output is still held when the first block's all-gather lands. In bytes (unit_bytes: the
    blocks' linear weights in float8 under --float8-all-gather).
    """
    c = store.compute
    root, block = unit_bytes(layout.root, dp, c), unit_bytes(layout.block, dp, c, float8)
    if stage is ZeroStage.zero2:
        blocks = sum(unit_bytes(shapes, dp, c, float8) * n for shapes, n in layout.block_kinds)
        gathered, how = root + blocks, "every unit, reshard_after_forward=False"
    else:
        gathered, how = root + (block if layout.num_blocks else 0), "root + one block, reshard_after_forward=True"
    staging = block if stage is ZeroStage.zero2 and layout.num_blocks else max(root, block)
    how += ", the blocks' linear weights in float8" if float8 else ""
    gathered_term = Term(f"{GATHERED} ({how})", gathered, Phase.backward, FSDP2_SOURCE + ": all_gather_outputs")
    if dp == 1:  # measured: one rank keeps no all-gather output
        return (gathered_term,)
    return (gathered_term, Term(STAGING, staging, Phase.backward, FSDP2_SOURCE + ": comm_ctx.all_gather_state"))


def unsharded_grad(layout: ModelLayout, dp: int, store: Storage) -> Term:
    """The gradient of the unit being reduced is whole (padded) before its reduce-scatter: largest unit x c."""
    return Term("unsharded gradient (one unit)", max(_padded(u, dp) for u in layout.unit_numels) * store.compute,
                Phase.backward, "post-backward reduce-scatter input")


def fsdp1_settings(stage: ZeroStage, dp: int, mixed: bool, layout: ModelLayout) -> tuple[Setting, ...]:
    strategy = FSDP1_STRATEGY[stage] if dp > 1 else "NO_SHARD (FSDP switches to it on one rank)"
    out = [Setting("sharding_strategy", strategy, "torch/distributed/fsdp/api.py: ShardingStrategy"),
           Setting("wrapping unit", _unit_words(layout), "auto_wrap_policy=ModuleWrapPolicy({block class})"),
           Setting("backward_prefetch", "BACKWARD_PRE", "torch/distributed/fsdp/api.py: BackwardPrefetch")]
    if mixed:
        out.append(Setting("mixed_precision", "MixedPrecision(param_dtype=bf16, reduce_dtype=bf16)", FSDP1_SOURCE))
    return tuple(out)


def fsdp2_settings(stage: ZeroStage, mixed: bool, layout: ModelLayout) -> tuple[Setting, ...]:
    out = [Setting("fully_shard", "reshard_after_forward=" + str(stage is ZeroStage.zero3), FSDP2_SOURCE),
           Setting("wrapping unit", _unit_words(layout), "fully_shard(block) for each block, then fully_shard(model)")]
    if mixed:
        out.append(Setting("mp_policy", "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16)", FSDP2_SOURCE))
    return tuple(out)


def _unit_words(layout: ModelLayout) -> str:
    if not layout.num_blocks:
        return f"one unit of {layout.root_numel:,} parameters (wrapping unknown)"
    if len(layout.block_kinds) > 1:
        kinds = ", ".join(f"{n} of {sum(prod(s) for s in shapes):,}" for shapes, n in layout.block_kinds)
        return f"root ({layout.root_numel:,} params) + {layout.num_blocks} blocks ({kinds})"
    return f"root ({layout.root_numel:,} params) + {layout.num_blocks} blocks of {layout.block_numel:,}"
