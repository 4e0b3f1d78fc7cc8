"""DeepSpeed's GPU buffers on top of the model states, one function per buffer, sized from its knobs.

Pure: imports neither rich, typer nor yaml and does no I/O. Sources are DeepSpeed v0.19.6 code paths (commit
edaa7221: runtime/zero/stage_1_and_2.py, stage3.py, partitioned_param_coordinator.py, partition_parameters.py),
named per function; formulas and caveats in docs/formulas.md.
"""

from __future__ import annotations

from zeroplan.memory.recipes import FP32_BYTES, Recipe
from zeroplan.memory.setup import DeepSpeedKnobs, OffloadDevice, ZeroStage
from zeroplan.memory.terms import Phase, Term, shard_numel

BUCKET_BUFFERS_WITH_OVERLAP = 2  # stage 1-2 IPG bucket is double-buffered when overlap_comm (stage_1_and_2.py)
HPZ_TERM = "hpZ secondary partition"  # named: checks_memory tells this deliberate ZeRO++ trade from other buffers
OFFLOAD_STAGING_BYTES = 2  # stage 1-2 CPU offload: temp_grad_buffer_for_gpu_offload, largest param x 2 B


def fp32_grad_partition(num_params: int, recipe: Recipe, stage: ZeroStage, dp: int, knobs: DeepSpeedKnobs) -> Term | None:
    """fp32 gradients the optimizer step reads: 4 B x (Psi / N_d), on the optimizer's device.

    Stages 0-2 (FP16/BF16 optimizer, stage_1_and_2.py `single_partition_of_fp32_groups[i].grad`): the whole
    partition (the whole model at stage 0). Stage 3 (stage3.py) converts one sub-group at a time:
    min(sub_group_size, Psi / N_d) x 4 B. Only with an fp32 master copy; offloaded it lives on the CPU.
    """
    if not recipe.has_master or knobs.offload_optimizer is not OffloadDevice.none:
        return None
    numel = num_params if stage is ZeroStage.zero0 else shard_numel(num_params, dp)
    if stage is ZeroStage.zero3:
        return Term(
            name="fp32 grad sub-group (step)",
            bytes=min(knobs.sub_group_size, numel) * FP32_BYTES,
            phase=Phase.step,
            source="stage3.py: fp32 grads per sub_group_size at step()",
        )
    return Term(
        name="fp32 grad partition (step)",
        bytes=numel * FP32_BYTES,
        phase=Phase.step,
        source="stage_1_and_2.py: single_partition_of_fp32_groups[i].grad",
    )


def reduce_bucket(recipe: Recipe, stage: ZeroStage, dp: int, knobs: DeepSpeedKnobs) -> Term | None:
    """Gradient reduction bucket: reduce_bucket_size x grad element bytes, doubled by overlap_comm in stages 1-2.

    Stages 1-3 allocate the IPG bucket when contiguous_gradients is on (it is forced on with CPU offload);
    stage 0 flattens up to allgather_bucket_size elements per all-reduce at the accumulation boundary.
    """
    element = recipe.param_bytes
    if stage is ZeroStage.zero0:
        if dp == 1:
            return None
        return Term(
            name="all-reduce bucket",
            bytes=knobs.allgather_bucket_size * element,
            phase=Phase.step,
            source="engine.py: buffered_allreduce_fallback flattens one bucket",
        )
    if not knobs.contiguous_gradients and knobs.offload_optimizer is OffloadDevice.none:
        return None
    double = stage < ZeroStage.zero3 and knobs.overlap_comm_for(stage)
    copies = BUCKET_BUFFERS_WITH_OVERLAP if double else 1
    return Term(
        name="reduce bucket" + (" x2 (overlap_comm)" if double else ""),
        bytes=knobs.reduce_bucket_size * element * copies,
        phase=Phase.always,
        source="stage_1_and_2.py / stage3.py: IPG bucket of reduce_bucket_size elements",
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
    live = min(max(largest_layer_params, knobs.stage3_max_live_parameters), largest_layer_params + knobs.stage3_prefetch_bucket_size)
    return [
        Term(
            name="gathered params (live + prefetch)",
            bytes=live * recipe.param_bytes,
            phase=Phase.backward,
            source="partitioned_param_coordinator.py: prefetch up to stage3_prefetch_bucket_size",
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
        reduce_bucket(recipe, stage, dp, knobs),
        fp32_grad_partition(num_params, recipe, stage, dp, knobs),
        offload_staging(largest_layer_params, stage, knobs),
    ]
    if stage is ZeroStage.zero3:
        terms += stage3_live_params(largest_layer_params, recipe, knobs)
        terms += [stage3_persistent_params(small_param_numel, dp, recipe, knobs), hpz_secondary(num_params, recipe, knobs)]
    return tuple(t for t in terms if t is not None and t.bytes > 0)
