"""The step of each PyTorch engine as timeline Moments (zeroplan.memory.timeline): what is alive at each event.

Gradients start absent (`zero_grad(set_to_none=True)`, PyTorch's default since 2.0) and appear as each unit's
backward produces them; with gradient accumulation the last micro-step starts with all of them. Gathered
parameters, unsharded gradients, buckets and staging tensors are the engine's buffers (the table's lines).

- DDP (torch/nn/parallel/distributed.py, c10d/reducer.cpp): buckets allocated at construction; a block's
  gradients land in its backward, the root's (embeddings, tied head) in the embedding's backward, when autograd
  has summed both uses of a tied weight. gradient_as_bucket_view: the buckets are the gradients, alive from
  construction; each tensor's gradient is first made by autograd and then copied into its bucket view, so the
  largest tensor's gradient is briefly held twice.
- FSDP1 (_runtime_utils.py): SHARD_GRAD_OP gathers each unit in its forward and frees it after its backward;
  FULL_SHARD frees a block after its forward and gathers it again in its backward with the next one prefetched
  (BACKWARD_PRE); the root is never resharded after forward. A unit's backward holds its whole padded gradient
  until the reduce-scatter leaves its shard.
- FSDP2 (_fsdp_param_group.py): as FSDP1 per unit; the last all-gather's output is kept (all_gather_state)
  through the forward; the last reduce-scatter's input (reduce_scatter_states) until the next one. Its
  all-gather and reduce-scatter streams' pools stay reserved (memory.engines.streams): each Moment carries them
  (stream_pool) and the part of them its own lines already hold (stream_live, beside the gradients).
Each checked op by op against validation/measure_engines.py (docs/engines.md). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from zeroplan.memory.engines.fsdp import dim0_shard, flat_shard, unit_bytes
from zeroplan.memory.engines.layout import ModelLayout
from zeroplan.memory.engines.storage import Storage
from zeroplan.memory.engines.streams import all_gather_stream_bytes, reduce_stream_bytes
from zeroplan.memory.setup import EngineOptions, ZeroStage
from zeroplan.memory.states import ModelStates
from zeroplan.memory.timeline import EMBEDDING_BACKWARD, END_OF_FORWARD, Moment, step_moments


def _layers(layout: ModelLayout) -> int:
    return layout.num_blocks or 1  # a layout without blocks runs as one unit


def ddp_moments(layout: ModelLayout, states: ModelStates, store: Storage, buckets: int,
                options: EngineOptions) -> tuple[Moment, ...]:
    """DDP and DDP + ZeroRedundancyOptimizer: full parameters, the rank's optimizer states, buckets always."""
    p, o, g_all = states.parameters, states.optimizer_states, states.gradients
    blocks, block_g = layout.num_blocks, layout.block_numel * store.grad
    view = options.gradient_as_bucket_view
    largest = max((prod(s) for s in layout.tensors()), default=0)
    in_root = largest in {prod(s) for s in layout.root} or not blocks

    def at(name, phase, layer, **acts):
        if phase == "backward" and layer is not None:
            produced = (blocks - layer) * block_g
        else:
            produced = g_all if name == EMBEDDING_BACKWARD or phase == "step" else 0
        if not blocks and phase == "backward" and name != EMBEDDING_BACKWARD:
            produced = 0
        if view:  # the buckets are the gradients; the largest tensor's autograd gradient waits for its copy
            transit = (name == EMBEDDING_BACKWARD) if in_root else (phase == "backward" and layer is not None)
            grads = g_all + (largest * store.grad if transit else 0)
            return Moment(name, phase, layer, p, grads, grads, o, buffers=0, **acts)
        return Moment(name, phase, layer, p, produced, g_all, o, buffers=buckets, **acts)

    return tuple(step_moments(_layers(layout) if blocks else 0, at))


def fsdp1_moments(layout: ModelLayout, states: ModelStates, store: Storage, stage: ZeroStage, dp: int,
                  mixed: bool, offloaded: bool = False, offload_copy: int = 0) -> tuple[Moment, ...]:
    """FSDP1 per event. NO_SHARD (or one rank): whole gradients per unit, the low-precision copy as measured."""
    p, o, g_all, c = states.parameters, states.optimizer_states, states.gradients, store.compute
    blocks = layout.num_blocks
    if stage is ZeroStage.zero0 or dp == 1:  # measured: the low-precision copy of the root and of the block running
        root_c, block_c = (layout.root_numel * c, layout.block_numel * c) if mixed else (0, 0)

        def copies(name, phase, layer):
            if phase in ("start", "step"):
                return 0
            return root_c if name in (END_OF_FORWARD, EMBEDDING_BACKWARD) else root_c + block_c

        root_grad = layout.root_numel * (c if mixed else store.grad)  # the root's, before its cast to fp32
        return _unit_moments(p, o, g_all, blocks, layout.block_numel * store.grad, True, root_grad, copies,
                             _none, _none)
    root_full, block_full = flat_shard(layout.root_numel, dp) * dp, flat_shard(layout.block_numel, dp) * dp
    # CPU offload: the reduced shards go to the host; a unit's CPU shard is copied in while it is gathered
    block_shard_g = 0 if offloaded else flat_shard(layout.block_numel, dp) * store.grad
    mp = (max(flat_shard(u, dp) for u in layout.unit_numels) * c if mixed else 0) + offload_copy
    full = stage is ZeroStage.zero3

    def gathered(name, phase, layer):
        if phase in ("start", "step"):
            return 0
        if phase == "forward" and layer is not None:
            return (root_full + (block_full if full else (layer + 1) * block_full)) * c + mp
        if layer is None:
            on = 0 if (full or name == EMBEDDING_BACKWARD) else blocks * block_full
            return (root_full + on) * c
        if full:  # the prefetch's low-precision shard is freed before this block's unsharded gradient exists
            return (root_full + block_full * (2 if layer > 0 else 1)) * c
        return (root_full + (layer + 1) * block_full) * c

    def unsharded(name, phase, layer):
        if phase != "backward" or (layer is None and name != EMBEDDING_BACKWARD):
            return 0
        return (block_full if layer is not None else root_full) * c

    return _unit_moments(p, o, g_all, blocks, block_shard_g, False, 0, gathered, unsharded, _none)


def fsdp2_moments(layout: ModelLayout, states: ModelStates, store: Storage, stage: ZeroStage, dp: int,
                  staging: int, offloaded: bool = False, offload_copy: int = 0,
                  reduce_bytes: int | None = None, float8: bool = False) -> tuple[Moment, ...]:
    """FSDP2 per event: unsharded units, the kept all-gather output in the forward, the kept reduce-scatter input
    (in reduce_dtype: `reduce_bytes` per element, the param dtype's when None); `float8`: --float8-all-gather."""
    p, o, g_all, c = states.parameters, states.optimizer_states, states.gradients, store.compute
    blocks = layout.num_blocks
    root_u = unit_bytes(layout.root, dp, c)
    block_u, block_grad = unit_bytes(layout.block, dp, c, float8), unit_bytes(layout.block, dp, c)
    block_rs = block_grad // c * (reduce_bytes or c)
    block_shard_g = 0 if offloaded else sum(dim0_shard(s, dp) for s in layout.block) * store.grad
    keep = stage is ZeroStage.zero2  # reshard_after_forward=False
    staging += offload_copy  # CPU offload: the all-gather input copied to the GPU

    def gathered(name, phase, layer):
        if phase in ("start", "step"):
            return 0
        if phase == "forward":
            on = blocks if layer is None else layer + 1
            if not keep:
                on = 0 if layer is None else 1
            return root_u + on * block_u + staging
        if layer is None:
            return root_u + (blocks * block_u if keep and name != EMBEDDING_BACKWARD else 0)
        return root_u + block_u * ((layer + 1) if keep else (2 if layer > 0 else 1))

    def unsharded(name, phase, layer):
        if phase != "backward" or (layer is None and name != EMBEDDING_BACKWARD):
            return 0
        return block_grad if layer is not None else root_u

    def reduce_input(name, phase, layer):  # the previous unit's reduce-scatter input, kept until this one's
        if phase != "backward" or (layer is None and name != EMBEDDING_BACKWARD) or layer == blocks - 1:
            return 0
        return block_rs

    def staged(name, phase, layer):  # the all-gather output among the buffers: the copy-in stream's, allocated
        return staging - offload_copy if phase == "forward" else 0

    pools = (reduce_stream_bytes(layout, dp, store, reduce_bytes or c, offloaded)
             + all_gather_stream_bytes(layout, dp, store, not keep, float8))
    moments = _unit_moments(p, o, g_all, blocks, block_shard_g, False, 0, gathered, unsharded, reduce_input)
    return tuple(replace(m, stream_pool=pools, stream_live=staged(m.name, m.phase, m.layer)) for m in moments)


def _none(name, phase, layer) -> int:
    return 0


def _unit_moments(p, o, g_all, blocks, block_g, whole, root_grad, gathered, unsharded, held) -> tuple[Moment, ...]:
    """Moments of a unit-wrapped engine: the gradients produced so far, plus the buffers of each event.

    Sharded (whole False): in block i's backward the shards of the blocks after it (its own is unsharded, a
    buffer); NO_SHARD (whole True): the whole gradients of blocks i.. and, in the embedding's, the root's.
    """

    def at(name, phase, layer, **acts):
        if phase == "backward" and layer is not None:
            fresh = (blocks - layer if whole else blocks - 1 - layer) * block_g
        elif name == EMBEDDING_BACKWARD:
            fresh = blocks * block_g + root_grad
        else:
            fresh = g_all if phase == "step" else 0
        buffers = gathered(name, phase, layer) + unsharded(name, phase, layer) + held(name, phase, layer)
        return Moment(name, phase, layer, p, fresh, g_all, o, buffers=buffers, **acts)

    return tuple(step_moments(blocks, at))
