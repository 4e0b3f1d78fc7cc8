"""What FSDP2 allocates on its own CUDA streams, which the caching allocator keeps reserved for those streams.

The caching allocator caches a freed block for the stream it was allocated on; only an allocation on the same stream
reuses it, and cached blocks go back to the device only on `torch.cuda.empty_cache()` or when an allocation would
otherwise fail (it frees every cached block and retries, counted in `num_alloc_retries`) (PyTorch docs, "CUDA
semantics", memory management; `torch.Tensor.record_stream`). FSDP2 allocates each unit's reduce-scatter output on
its reduce-scatter stream and the sharded gradients are views of it (or of its cast to the parameter dtype, made on
the same stream): torch==2.13.0:torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, `foreach_reduce`
(`with device_handle.stream(reduce_scatter_stream): reduce_output = reduce_scatter_comm.allocate(...)`,
`_to_dtype_if_needed(reduce_output, orig_dtype)`, `torch.as_strided(reduce_output, ...)`). After
`zero_grad(set_to_none=True)` their blocks stay reserved for that stream, so the next forward's activations cannot
use them: `max_memory_reserved` (and nvidia-smi) count them at the forward's peak, `max_memory_allocated` does not.
Likewise each all-gather's output and its input (the shard cast to param_dtype) are allocated on the all-gather
copy-in stream (`foreach_all_gather`: `with device_handle.stream(all_gather_copy_in_stream)`), and the previous
unit's output is kept (`comm_ctx.all_gather_state`) until the next unit's all-gather has been waited on.
Measured on CPU: validation/measure_fsdp2_streams.py (which stream each allocation is made on). Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.memory.engines.fsdp import dim0_shard, unit_bytes
from zeroplan.memory.engines.layout import ModelLayout
from zeroplan.memory.engines.storage import Storage
from zeroplan.memory.terms import Phase, Term

STREAM_CACHE = "cached for FSDP2's streams (reserved, not allocated)"
# The loss's backward (memory.activations.loss, LossBytes.backward) asks for two T x V gradients of the log-softmax's
# dtype. With the fp32 upcast, what the loop has freed by then is the e T V logits and the 4 T V copy, side by side:
# best fit puts the first gradient there and leaves e T V that the second (4 T V) cannot use, so it takes a new
# segment. Replayed through the allocator's rules on a recorded step: validation/replay_allocator.py.
LOSS_HOLE = "the loss's backward: the freed logits' block (reserved, not allocated)"
LOSS_HOLE_SOURCE = ("c10/cuda/CUDACachingAllocator.cpp: best fit, a block split but never moved; "
                    "validation/replay_allocator.py")
STREAM_SOURCE = ("torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce (reduce_output on the "
                 "reduce-scatter stream); the caching allocator keeps a freed block for its stream")


def reduce_stream_bytes(layout: ModelLayout, dp: int, store: Storage, reduce_bytes: int, offloaded: bool = False) -> int:
    """The most FSDP2's reduce-scatter stream holds at once, from the second step on.

    pool = G + u x r (r != g), G = the rank's sharded gradients (fsdp2_shard x g), u = the largest unit's shard,
    r = reduce_dtype bytes: a reduce in another dtype than the gradient's makes the unit's output in r and then its
    cast in g, both on that stream (the root, reduced last, is the largest unit). CPU offload moves each unit's
    gradient to the host, so the stream holds one unit's output (and cast) at a time: u x r (+ u x g).
    """
    units = [layout.root] + [shapes for shapes, _ in layout.block_kinds]
    largest = max(sum(dim0_shard(s, dp) for s in unit) for unit in units)
    cast = largest * reduce_bytes if reduce_bytes != store.grad else 0
    if offloaded:
        return cast + largest * store.grad
    total = sum(dim0_shard(s, dp) for s in layout.tensors())
    return total * store.grad + cast


def all_gather_stream_bytes(layout: ModelLayout, dp: int, store: Storage, reshard: bool, float8: bool = False) -> int:
    """The most FSDP2's all-gather copy-in stream holds at once: two units' all-gather outputs (the previous one
    kept until the next is waited on) and the next one's input, its shard cast to param_dtype.

    pool = max(R + B, 2 B if resharded after forward (the backward gathers blocks again, one prefetched)) + b,
    R, B = the root's and the largest block's padded unsharded bytes (c each), b = that block's shard (c). One rank
    gathered nothing (measured: validation/measure_engines.py): 0. --float8-all-gather: the blocks' linear weights in
    float8 in both (fsdp.unit_bytes).
    """
    if dp == 1:
        return 0
    c = store.compute
    root = unit_bytes(layout.root, dp, c)
    if not layout.block_kinds:
        return root + unit_bytes(layout.root, dp, c, shard=True)
    shapes = max((shapes for shapes, _ in layout.block_kinds), key=lambda ss: unit_bytes(ss, dp, c, float8))
    block = unit_bytes(shapes, dp, c, float8)
    return max(root + block, 2 * block if reshard else 0) + unit_bytes(shapes, dp, c, float8, shard=True)


def reserved_terms(moments, timeline, prof, peak: int) -> tuple[Term, ...]:
    """What the allocator keeps reserved beyond the allocated peak, as lines (none when nothing is):

    streams    max over events (event bytes + its streams' cached bytes) - peak: the pools less what the event's
               own lines hold on those streams (each stream keeps its high-water mark from the second step on)
    loss hole  the same with the loss's backward also holding `prof.loss_hole` (LOSS_HOLE below), less the above
    """
    cached = [m.stream_cached(prof.accumulating) for m in moments]
    hole = [prof.loss_hole if m.loss_backward else 0 for m in moments]
    if not any(cached) and not any(hole):
        return ()
    streams = max(e.total + c for e, c in zip(timeline.events, cached, strict=True))
    both = max(e.total + c + h for e, c, h in zip(timeline.events, cached, hole, strict=True))
    lines = ((STREAM_CACHE, max(streams, peak) - peak, STREAM_SOURCE), (LOSS_HOLE, both - max(streams, peak), LOSS_HOLE_SOURCE))
    return tuple(Term(name, n, Phase.always, src) for name, n, src in lines if n > 0)
