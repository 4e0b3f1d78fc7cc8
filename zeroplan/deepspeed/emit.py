"""A DeepSpeed config (ds_config.json mapping) for a planned run (advise/emit.py: the advisor's recommendation).

Stage, precision (bf16, or fp16 with dynamic loss scaling where the hardware has no bf16: the advisor has
already switched), the batch triple satisfying DeepSpeed's identity train_batch_size = micro x accumulation x dp,
overlap_comm and contiguous_gradients, the bucket and stage-3 knobs the memory model was planned with, and the
offload blocks. Keys and defaults: DeepSpeed v0.19.8 (`deepspeed/runtime/config.py`,
`runtime/zero/config.py`, `runtime/zero/offload_config.py`). No optimizer or scheduler block:
those stay the training script's (with offload, DeepSpeed wants its CPU Adam: name "AdamW" in an optimizer
block or build DeepSpeedCPUAdam yourself). Pure: returns a dict; the CLI writes it.
"""

from __future__ import annotations

from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    OffloadDevice,
    Precision,
    ZeroStage,
)

DEFAULT_NVME_PATH = "/local_nvme"  # DeepSpeed docs' example path (docs/_pages/config-json.md); edit for your nodes
FP16_LOSS_SCALING = {"loss_scale": 0, "initial_scale_power": 16}  # 0 = dynamic; DeepSpeed's defaults, written out


def _precision_blocks(precision: Precision) -> dict:
    if precision is Precision.fp16_mixed:
        return {"fp16": {"enabled": True, **FP16_LOSS_SCALING}}
    if precision is Precision.bf16_mixed:
        return {"bf16": {"enabled": True}}
    if precision is Precision.bf16_true:  # no fp32 master: what dsconfig reads back as bf16-true
        return {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}}
    return {}  # fp32: DeepSpeed's default when neither section is enabled


def _offload(device: OffloadDevice, nvme_path: str) -> dict:
    block: dict = {"device": device.value, "pin_memory": True}
    if device is OffloadDevice.nvme:
        block["nvme_path"] = nvme_path
    return block


def zero_section(stage: ZeroStage, knobs: DeepSpeedKnobs, nvme_path: str = DEFAULT_NVME_PATH) -> dict:
    """zero_optimization for one stage, with the knobs the memory model was planned with."""
    zero: dict = {"stage": int(stage)}
    if stage is ZeroStage.zero0:
        return zero
    zero.update(overlap_comm=knobs.overlap_comm_for(stage), contiguous_gradients=knobs.contiguous_gradients,
                reduce_bucket_size=knobs.reduce_bucket_size)
    if stage is not ZeroStage.zero3:
        zero["allgather_bucket_size"] = knobs.allgather_bucket_size
    else:
        zero.update(stage3_prefetch_bucket_size=knobs.stage3_prefetch_bucket_size,
                    stage3_param_persistence_threshold=knobs.stage3_param_persistence_threshold,
                    stage3_max_live_parameters=knobs.stage3_max_live_parameters,
                    sub_group_size=knobs.sub_group_size)
        if knobs.zero_hpz_partition_size > 1:
            zero["zero_hpz_partition_size"] = knobs.zero_hpz_partition_size
        if knobs.zero_quantized_weights:
            zero["zero_quantized_weights"] = True
        if knobs.zero_quantized_gradients:
            zero["zero_quantized_gradients"] = True
    if knobs.offload_optimizer is not OffloadDevice.none:
        zero["offload_optimizer"] = _offload(knobs.offload_optimizer, nvme_path)
    if knobs.offload_param is not OffloadDevice.none:
        zero["offload_param"] = _offload(knobs.offload_param, nvme_path)
    return zero


def ds_config(stage: ZeroStage, knobs: DeepSpeedKnobs, precision: Precision, *, micro_batch: int, grad_accum: int,
              dp: int, nvme_path: str = DEFAULT_NVME_PATH) -> dict:
    """The ds_config mapping for one run: the batch triple (train_batch_size = micro x accumulation x dp), precision, ZeRO."""
    return {
        "train_batch_size": micro_batch * grad_accum * dp,
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        **_precision_blocks(precision),
        "zero_optimization": zero_section(stage, knobs, nvme_path),
    }
