"""ZeRO's collectives on a mesh: perf/schedule.py's stage_terms and offload_terms with one rank's shard sizes, the
dense tensors over the data-parallel group of dp x cp ranks, the experts over theirs of dp x cp / ep ranks
(memory/mesh.py's shard_groups; Megatron's distributed optimizer and torchtitan's FSDP mesh shard the same way).
Pure: no I/O.
"""

from __future__ import annotations

import math

from zeroplan.memory.setup import DeepSpeedKnobs, OffloadDevice, ZeroStage
from zeroplan.perf.collectives import node_link
from zeroplan.perf.placement import Group
from zeroplan.perf.schedule import (
    CommContext,
    CommTerm,
    allgather_buckets,
    offload_terms,
    stage_terms,
)


def _context(layout, group: Group, num_params: int, layers: int, stage: ZeroStage, knobs: DeepSpeedKnobs,
             elem_bytes: float) -> CommContext:
    node = node_link(layout.hw, layout.gpus_per_node, layout.topology)
    return CommContext(
        num_params=num_params, num_grad_params=num_params, elem_bytes=elem_bytes, dp=group.link, node=node,
        hw=layout.hw, layers=max(1, layers),
        reduce_buckets=math.ceil(num_params / knobs.reduce_bucket_size),
        allgather_buckets=allgather_buckets(num_params, knobs), prefetch=knobs.stage3_prefetch_bucket_size > 0,
        overlap_reduce=knobs.overlap_comm_for(stage), knobs=knobs)


def zero_terms(layout, w, stage: ZeroStage, knobs: DeepSpeedKnobs, elem_bytes: float) -> tuple[CommTerm, ...]:
    """The stage's transfers for one rank of stage `w`: dense elements over the dense group (one collective per
    layer of the stage in ZeRO-3), expert elements over the expert group (one per MoE layer). Cached on the
    layout: they depend on the stage, the knobs and the element size, not on the batch."""
    key = (w.index, stage, knobs, elem_bytes)
    if (found := layout.cache.get(key)) is not None:
        return found
    terms: list[CommTerm] = []
    parts = ((layout.groups["dp"], w.dense, w.layers, ""), (layout.groups["expert dp"], w.experts, w.moe_layers,
                                                             "experts: "))
    for group, numel, layers, prefix in parts:
        if not numel:
            continue
        ctx = _context(layout, group, numel, layers, stage, knobs, elem_bytes)
        found = stage_terms(stage, ctx) + offload_terms(stage, ctx)
        terms += [t.model_copy(update={"name": prefix + t.name}) if prefix else t for t in found]
    layout.cache[key] = result = tuple(terms)
    return result


def optimizer_step_s(layout, w, stage: ZeroStage, knobs: DeepSpeedKnobs, setup) -> float:
    """The optimizer step of one rank of stage `w` (perf.optimizer_step): its dense shard over the dense group and its
    expert shard over the expert group, on the GPU or, offloaded, on the host."""
    from zeroplan.perf.optimizer_step import shard_elements, step_time

    offload = knobs.offload_optimizer if stage is not ZeroStage.zero0 else OffloadDevice.none
    elements = (shard_elements(w.dense, stage, layout.groups["dp"].ranks)
                + shard_elements(w.experts, stage, layout.groups["expert dp"].ranks))
    return step_time(elements, setup, layout.hw, stage, offload).seconds if elements else 0.0
