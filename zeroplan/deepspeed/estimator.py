"""DeepSpeed's own model-state estimators, reproduced to the byte (DeepSpeed v0.19.8; unchanged from v0.19.6).

`estimate_zero2_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py, formula since v0.14.3,
PR #5099) and `estimate_zero3_model_states_mem_needs` (stage3.py, unchanged since 2021), and the rows their
`_all_cold` wrappers print. The arithmetic is kept in DeepSpeed's float evaluation order so int() truncates
the same way. Pure: no I/O. Formulas: deepspeedai/DeepSpeed@edaa7221 (same files) and
`docs/code-docs/source/memory.rst`; test vectors and DeepSpeed's printed tables: docs/deepspeed.md.
"""

from dataclasses import dataclass

DEEPSPEED_VERSION = "0.19.8"  # the version whose formulas these are (docs/comparison.md ran it: same bytes)
DS_BUFFER_FACTOR = 1.5  # additional_buffer_factor default
DS_ZERO2_SHARDED_BYTES = 18  # 2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 Adam m, v (stage_1_and_2.py comment)
DS_ZERO3_SHARDED_BYTES = 18  # 16 B fp32 param, grad, m, v + 2 B fp16 param
DS_ZERO3_OFFLOAD_SHARDED_BYTES = 16  # fp32 param, grad, m, v on the CPU
DS_FP16_PARAM_BYTES = 2  # 16-bit params kept on GPU
DS_FP32_INIT_BYTES = 4  # every local rank materialising an fp32 copy at load time (no zero.Init)
DS_MIN_CPU_MULTIPLIER = 16  # ZeRO-2 offload: max(4 x total_gpus, 16)
DS_LARGEST_LAYER_BYTES = 4  # 2 B gathered 16-bit params + 2 B 16-bit grads of the largest layer


@dataclass(frozen=True, slots=True, kw_only=True)
class DeepSpeedRow:
    """One row of DeepSpeed's `_all_cold` table: the options and the integer bytes it returns."""

    offload_optimizer: str  # 'cpu' or 'none'
    offload_param: str | None = None  # ZeRO-3 only: 'cpu' or 'none'
    zero_init: bool | None = None  # ZeRO-3 only
    cpu_bytes: int
    gpu_bytes: int


def zero2_model_states(total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1, cpu_offload: bool = True,
                       additional_buffer_factor: float = DS_BUFFER_FACTOR) -> tuple[int, int]:
    """(cpu_bytes, gpu_bytes) of `estimate_zero2_model_states_mem_needs`.

    GPU: 2 P with optimizer offload, else 2 P + int(18 P / T). CPU: P max(4 T, 16) f with offload
    (T = all GPUs), else 4 P g f (g = GPUs per node).
    """
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = DS_FP16_PARAM_BYTES * total_params
        cpu_mem = total_params * max(DS_FP32_INIT_BYTES * total_gpus, DS_MIN_CPU_MULTIPLIER) * additional_buffer_factor
    else:
        gpu_mem = DS_FP16_PARAM_BYTES * total_params + int(DS_ZERO2_SHARDED_BYTES * total_params / total_gpus)
        cpu_mem = total_params * DS_FP32_INIT_BYTES * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def zero3_model_states(total_params: int, largest_layer_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
                       cpu_offload: bool = True, cpu_offload_params: bool = True, zero_init: bool = True,
                       additional_buffer_factor: float = DS_BUFFER_FACTOR) -> tuple[int, int, int]:
    """(cpu_bytes, gpu_bytes, largest_layer_memory) of `estimate_zero3_model_states_mem_needs`.

    GPU: 4 L (+ int(2 P / T) without param offload) (+ int(18 P / T) without any offload).
    CPU per node: 18 P / n f or 16 P / n f with zero_init; max(4 g, 18/n or 16/n) P f without; 4 L g f
    (zero_init) or 4 P g f without offload.
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = DS_LARGEST_LAYER_BYTES * largest_layer_params
    if cpu_offload:
        sharded = DS_ZERO3_SHARDED_BYTES if cpu_offload_params else DS_ZERO3_OFFLOAD_SHARDED_BYTES
        gpu_mem = largest_layer_memory
        if not cpu_offload_params:
            gpu_mem = largest_layer_memory + int(DS_FP16_PARAM_BYTES * total_params / total_gpus)
        if zero_init:
            cpu_mem = total_params * sharded * gpus_factor * additional_buffer_factor
        else:
            cpu_mem = total_params * max(DS_FP32_INIT_BYTES * num_gpus_per_node, sharded * gpus_factor) * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(DS_ZERO3_SHARDED_BYTES * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * DS_FP32_INIT_BYTES * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * DS_FP32_INIT_BYTES * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


def zero2_rows(total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
               additional_buffer_factor: float = DS_BUFFER_FACTOR) -> list[DeepSpeedRow]:
    """The rows `estimate_zero2_model_states_mem_needs_all_cold` prints, in its order."""
    rows = []
    for cpu_offload in (True, False):
        cpu, gpu = zero2_model_states(total_params, num_gpus_per_node, num_nodes, cpu_offload, additional_buffer_factor)
        rows.append(DeepSpeedRow(offload_optimizer="cpu" if cpu_offload else "none", cpu_bytes=cpu, gpu_bytes=gpu))
    return rows


def zero3_rows(total_params: int, largest_layer_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
               additional_buffer_factor: float = DS_BUFFER_FACTOR) -> list[DeepSpeedRow]:
    """The six rows `estimate_zero3_model_states_mem_needs_all_cold` prints, in its order."""
    rows = []
    for cpu_offload in (True, False):
        for cpu_offload_params in (True, False):
            if cpu_offload_params and not cpu_offload:
                continue  # DeepSpeed skips param offload without optimizer offload
            for zero_init in (True, False):
                cpu, gpu, _ = zero3_model_states(total_params, largest_layer_params, num_gpus_per_node, num_nodes,
                                                 cpu_offload, cpu_offload_params, zero_init, additional_buffer_factor)
                rows.append(DeepSpeedRow(
                    offload_optimizer="cpu" if cpu_offload else "none",
                    offload_param="cpu" if cpu_offload_params else "none",
                    zero_init=zero_init, cpu_bytes=cpu, gpu_bytes=gpu,
                ))
    return rows


@dataclass(frozen=True, slots=True, kw_only=True)
class DeepSpeedEstimate:
    """DeepSpeed's two estimator tables for one model and cluster."""

    deepspeed_version: str = DEEPSPEED_VERSION
    total_params: int
    largest_layer_params: int
    num_gpus_per_node: int
    num_nodes: int
    additional_buffer_factor: float
    zero2: tuple[DeepSpeedRow, ...]
    zero3: tuple[DeepSpeedRow, ...]


def estimate_deepspeed(total_params: int, largest_layer_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1,
                       additional_buffer_factor: float = DS_BUFFER_FACTOR) -> DeepSpeedEstimate:
    """Both `_all_cold` tables, as DeepSpeed computes them."""
    return DeepSpeedEstimate(
        total_params=total_params, largest_layer_params=largest_layer_params, num_gpus_per_node=num_gpus_per_node,
        num_nodes=num_nodes, additional_buffer_factor=additional_buffer_factor,
        zero2=tuple(zero2_rows(total_params, num_gpus_per_node, num_nodes, additional_buffer_factor)),
        zero3=tuple(zero3_rows(total_params, largest_layer_params, num_gpus_per_node, num_nodes, additional_buffer_factor)),
    )
