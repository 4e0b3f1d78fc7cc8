"""DeepSpeed's GPU buffers on top of the model states, one function per buffer, sized from its knobs.

Pure: imports neither rich, typer nor yaml and does no I/O. Sources are DeepSpeed v0.19.8 code paths
(runtime/zero/stage_1_and_2.py, stage3.py, partitioned_param_coordinator.py, partition_parameters.py, and
runtime/engine.py for stage 0), named per function; formulas and caveats in docs/formulas.md.
"""

from __future__ import annotations

from zeroplan.memory.recipes import FP32_BYTES, Recipe
from zeroplan.memory.setup import DeepSpeedKnobs, OffloadDevice, ZeroStage
from zeroplan.memory.terms import Phase, Term, shard_numel

BUCKET_BUFFERS_WITH_OVERLAP = 2  # stage 1-2 IPG bucket is double-buffered when overlap_comm (stage_1_and_2.py)
HPZ_TERM = "hpZ secondary partition"  # named: checks_memory tells this deliberate ZeRO++ trade from other buffers
# engine.py MEMORY_OPT_ALLREDUCE_SIZE: the elements per flattened all-reduce at stage 0. allreduce_gradients()
# is called with its default, so no config key sets it (allgather_bucket_size sizes the all-gathers of
# stages 1-2, which all_gather_into_tensor does without buckets on current torch).
STAGE0_ALLREDUCE_BUCKET = 500_000_000
OFFLOAD_STAGING_BYTES = 2  # stage 1-2 CPU offload: temp_grad_buffer_for_gpu_offload, largest param x 2 B


def stage3_sub_group_numel(num_params: int, largest_param_numel: int, dp: int, sub_group_size: int) -> int:
    """Elements of the largest ZeRO-3 sub-group on one rank: min(max(sub_group_size, ceil(P_max / N_d)), Psi / N_d).

    stage3.py `_create_fp16_sub_groups` adds parameter partitions to a sub-group until it holds at least
    sub_group_size elements, so a sub-group is never smaller than the largest parameter's partition
    (P_max / N_d), and sub_group_size 0 makes every parameter its own sub-group. P_max is taken as the
    largest layer (an embedding or LM head is one tensor); 0 when unknown (a bare --params).
    """
    shard = shard_numel(num_params, dp)
    return min(max(sub_group_size, shard_numel(largest_param_numel, dp)), shard)


def fp32_grad_partition(num_params: int, largest_param_numel: int, recipe: Recipe, stage: ZeroStage, dp: int,
                        knobs: DeepSpeedKnobs) -> Term | None:  # fmt: skip
    """fp32 gradients the optimizer step reads: 4 B x (Psi / N_d), on the optimizer's device.

    Stages 0-2 (FP16/BF16 optimizer, stage_1_and_2.py `single_partition_of_fp32_groups[i].grad`): the whole
    partition (the whole model at stage 0). Stage 3 (stage3.py) converts one sub-group at a time:
    stage3_sub_group_numel x 4 B. Only with an fp32 master copy; offloaded it lives on the CPU.
    """
    if not recipe.has_master or knobs.offload_optimizer is not OffloadDevice.none:
        return None
    numel = num_params if stage is ZeroStage.zero0 else shard_numel(num_params, dp)
    if stage is ZeroStage.zero3:
        floor = min(shard_numel(largest_param_numel, dp), numel)  # sub_group_size 0: one parameter per sub-group
        size = stage3_sub_group_numel(num_params, largest_param_numel, dp, knobs.sub_group_size) * FP32_BYTES
        return Term(
            name="fp32 grad sub-group (step)",
            bytes=size,
            phase=Phase.step,
            source="stage3.py: fp32 grads per sub_group_size at step()",
            knob="sub_group_size",
            knob_bytes=size - floor * FP32_BYTES,
        )
    return Term(
        name="fp32 grad partition (step)",
        bytes=numel * FP32_BYTES,
        phase=Phase.step,
        source="stage_1_and_2.py: single_partition_of_fp32_groups[i].grad",
    )


def reduce_bucket(num_params: int, recipe: Recipe, stage: ZeroStage, dp: int, knobs: DeepSpeedKnobs) -> Term | None:
    """Gradient reduction bucket: reduce_bucket_size x grad element bytes, doubled by overlap_comm in stages 1-2.

    Stages 1-3 allocate the IPG bucket of reduce_bucket_size when contiguous_gradients is on (it is forced
    on with CPU offload); stage 0 flattens up to min(5e8, Psi) elements per all-reduce at the accumulation
    boundary (STAGE0_ALLREDUCE_BUCKET: no key sets it).
    """
    element = recipe.param_bytes
    if stage is ZeroStage.zero0:
        if dp == 1:
            return None
        return Term(
            name="all-reduce bucket",
            bytes=min(STAGE0_ALLREDUCE_BUCKET, num_params) * element,
            phase=Phase.step,
            source="engine.py: buffered_allreduce_fallback flattens MEMORY_OPT_ALLREDUCE_SIZE elements at a time",
        )
    if not knobs.contiguous_gradients and knobs.offload_optimizer is OffloadDevice.none:
        return None
    double = stage < ZeroStage.zero3 and knobs.overlap_comm_for(stage)
    copies = BUCKET_BUFFERS_WITH_OVERLAP if double else 1
    size = knobs.reduce_bucket_size * element * copies
    return Term(
        name="reduce bucket" + (" x2 (overlap_comm)" if double else ""),
        bytes=size,
        phase=Phase.always,
        source="stage_1_and_2.py / stage3.py: IPG bucket of reduce_bucket_size elements",
        knob="reduce_bucket_size",
        knob_bytes=size,
    )


def offload_staging(largest_param_numel: int, stage: ZeroStage, knobs: DeepSpeedKnobs) -> Term | None:
    """Stages 1-2 with CPU optimizer offload keep a GPU staging buffer of the largest parameter's gradient."""
    if stage in (ZeroStage.zero0, ZeroStage.zero3) or knobs.offload_optimizer is OffloadDevice.none:
        return None
    return Term(
        name="offload grad staging",
        bytes=largest_param_numel * OFFLOAD_STAGING_BYTES,
        phase=Phase.always,
        source="stage_1_and_2.py: temp_grad_buffer_for_gpu_offload",
    )


def stage3_live_params(largest_layer_params: int, recipe: Recipe, knobs: DeepSpeedKnobs) -> list[Term]:
    """ZeRO-3 gathered parameters during forward/backward, and the largest layer's full gradient.

    live = min(max(L, stage3_max_live_parameters), L + stage3_prefetch_bucket_size) elements x p:
    the module being run (at least the largest layer L) is always gathered, and up to prefetch_bucket_size
    more are prefetched, while the total stays under stage3_max_live_parameters.
    The gradient of the module being reduced is whole before its reduce-scatter: L x g.
    DeepSpeed's estimator charges 4 L for these two (2 B params + 2 B grads).
    """
    largest, capped = largest_layer_params, max(largest_layer_params, knobs.stage3_max_live_parameters)
    live = min(capped, largest + knobs.stage3_prefetch_bucket_size)
    knob = "stage3_prefetch_bucket_size" if largest + knobs.stage3_prefetch_bucket_size <= capped else "stage3_max_live_parameters"
    return [
        Term(
            name="gathered params (live + prefetch)",
            bytes=live * recipe.param_bytes,
            phase=Phase.backward,
            source="partitioned_param_coordinator.py: prefetch up to stage3_prefetch_bucket_size",
            knob=knob,
            knob_bytes=(live - largest) * recipe.param_bytes,  # the largest layer is gathered whatever the knobs
        ),
        Term(
            name="largest layer full gradient",
            bytes=largest_layer_params * recipe.grad_bytes,
            phase=Phase.backward,
            source="stage3.py estimator: largest_layer_memory = 4 L",
        ),
    ]


def stage3_persistent_params(small_param_numel: int, dp: int, recipe: Recipe, knobs: DeepSpeedKnobs) -> Term | None:
    """Parameters at or under stage3_param_persistence_threshold stay whole on every GPU.

    They are counted at 1/N_d in the parameter term, so this line adds the rest: (1 - 1/N_d) x numel x p,
    with numel capped by stage3_model_persistence_threshold.
    """
    numel = min(small_param_numel, knobs.stage3_model_persistence_threshold)
    extra = numel - shard_numel(numel, dp)
    if extra <= 0:
        return None
    return Term(
        name="persistent small params",
        bytes=extra * recipe.param_bytes,
        phase=Phase.always,
        source="partition_parameters.py: numel <= stage3_param_persistence_threshold never partitioned",
        knob="stage3_param_persistence_threshold",
        knob_bytes=extra * recipe.param_bytes,
    )


def hpz_secondary(num_params: int, recipe: Recipe, knobs: DeepSpeedKnobs) -> Term | None:
    """ZeRO++ hpZ keeps a secondary copy of the parameters partitioned within a node: Psi / hpz x p."""
    if knobs.zero_hpz_partition_size <= 1:
        return None
    return Term(
        name=HPZ_TERM,
        bytes=shard_numel(num_params, knobs.zero_hpz_partition_size) * recipe.param_bytes,
        phase=Phase.always,
        source="ZeRO++ (arXiv:2306.10209) hpZ: zero_hpz_partition_size",
    )


def engine_buffers(
    *,
    num_params: int,
    largest_layer_params: int,
    small_param_numel: int,
    recipe: Recipe,
    stage: ZeroStage,
    dp: int,
    knobs: DeepSpeedKnobs,
) -> tuple[Term, ...]:
    """Every DeepSpeed buffer for one stage, each its own Term."""
    terms: list[Term | None] = [
        reduce_bucket(num_params, recipe, stage, dp, knobs),
        fp32_grad_partition(num_params, largest_layer_params, recipe, stage, dp, knobs),
        offload_staging(largest_layer_params, stage, knobs),
    ]
    if stage is ZeroStage.zero3:
        terms += stage3_live_params(largest_layer_params, recipe, knobs)
        terms += [stage3_persistent_params(small_param_numel, dp, recipe, knobs), hpz_secondary(num_params, recipe, knobs)]
    return tuple(t for t in terms if t is not None and t.bytes > 0)
