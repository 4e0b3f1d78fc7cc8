"""The optimizer step's time: AdamW over one GPU's shard where it runs, on the GPU, on the host, or from NVMe.

AdamW does ~10 floating-point operations per element against tens of bytes moved, far below any GPU's or CPU's
ridge point, so each is timed as memory traffic over bandwidth (docs/throughput.md, "Optimizer step"):
- GPU: elements x the implementation's bytes per element / HBM bandwidth (the hardware profile's);
- host (DeepSpeed's CPUAdam, or PyTorch AdamW on CPU tensors under FSDP CPU offload): the node's GPUs' shards
  together over the host's memory bandwidth, which they share;
- NVMe (ZeRO-Infinity, offload_optimizer nvme): the fp32 parameters and both states read from and written back
  to NVMe every step, then the host step (DeepSpeed's default pipeline_read/pipeline_write false: no overlap).
The host-link copies are perf.schedule.offload_terms'. Exposed: the step runs after the last backward.
Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.setup import Engine, OffloadDevice, Optimizer, OptimizerImpl, TrainingSetup, ZeroStage
from zeroplan.units import GB

# Bytes per element of one AdamW step (fp32 parameter, gradient and states):
# fused (torch._fused_adamw_, DeepSpeed FusedAdam multi_tensor_adam.cu, DeepSpeedCPUAdam cpu_adam.h Step_AVX):
# one pass reading p, g, m, v and writing p, m, v: 7 x 4 B.
FUSED_BYTES = 28
# foreach / for-loop (torch==2.13.0:torch/optim/adam.py _multi_tensor_adam, _single_tensor_adam): one pass per op:
# weight decay p*=(1-lr wd) 8, m.lerp_(g) 12, v.mul_ 8, v.addcmul_(g, g) 12, sqrt(v) 8, div_ 8, add_(eps) 8,
# p.addcdiv_(m, denom) 16: 80 B.
UNFUSED_BYTES = 80
# DeepSpeed's mixed-precision step then copies the fp32 partition into the 16-bit parameters: 4 B read + 2 B written.
COPY_BYTES = 6
# ZeRO-Infinity's optimizer on NVMe: the fp32 parameter and both states, 3 x 4 B, read in and written back per step.
NVME_BYTES = 12

# Named defaults where the hardware profile gives no number (docs/throughput.md, "Optimizer step"):
# host memory: 2 sockets x 8 DDR5-4800 channels x 38.4 GB/s (JEDEC JESD79-5: 4800 MT/s x 8 B) = 614.4 GB/s, the
# peak of a DGX H100's two Xeon Platinum 8480C (NVIDIA DGX H100 user guide; Intel ark: 8 channels DDR5-4800):
# a peak, so the host step is a lower bound.
DEFAULT_HOST_MEMORY_GBPS = 614.4
HOST_MEMORY_SOURCE = "2 x 8 DDR5-4800 channels, 614.4 GB/s peak (DGX H100: 2x Xeon 8480C)"
# NVMe: a DGX H100's 8 data-cache NVMe drives on PCIe 4.0 x4 each (NVIDIA DGX H100 user guide), 7.88 GB/s per link
# (16 GT/s x 4 lanes x 128/130 / 8): 63 GB/s per node, the links' bound for reads and writes; drives write slower.
DEFAULT_NVME_GBPS = 63.0
NVME_SOURCE = "8 NVMe drives x PCIe 4.0 x4 (7.88 GB/s each), 63 GB/s per node: the links' bound (DGX H100)"


class StepTime(NamedTuple):
    seconds: float
    where: str  # "GPU", "host" or "NVMe + host"
    note: str


def _impl(setup: TrainingSetup, engine: Engine, on_host: bool) -> OptimizerImpl:
    if setup.optimizer_impl is not None:
        return setup.optimizer_impl
    if Engine(engine) is Engine.deepspeed:
        return OptimizerImpl.fused  # FusedAdam, or DeepSpeedCPUAdam when offloaded
    # torch/optim/optimizer.py _default_to_fused_or_foreach: foreach for CUDA tensors only, so AdamW over
    # CPU-offloaded FSDP shards runs the for-loop
    return OptimizerImpl.for_loop if on_host else OptimizerImpl.foreach


def step_time(elements: int, setup: TrainingSetup, hw: HardwareSpec, stage: ZeroStage, offload: OffloadDevice,
              engine: Engine = Engine.deepspeed) -> StepTime:
    """Seconds of one optimizer step over `elements` (one GPU's shard of the parameters with gradients)."""
    on_host = offload is not OffloadDevice.none
    impl = _impl(setup, engine, on_host)
    per_element = FUSED_BYTES if impl is OptimizerImpl.fused else UNFUSED_BYTES
    if setup.optimizer is not Optimizer.adamw:
        per_element = FUSED_BYTES  # other optimizers: timed as one fused pass (docs/throughput.md)
    mixed = setup.precision.value.endswith("mixed")
    if not on_host:
        copy = COPY_BYTES if mixed and Engine(engine) is Engine.deepspeed else 0
        seconds = elements * (per_element + copy) / (hw.hbm_bandwidth_tbps * 1e12)
        return StepTime(seconds, "GPU", f"{impl.value} AdamW over the GPU's shard at {hw.hbm_bandwidth_tbps:g} TB/s")
    node = elements * hw.gpus_per_node  # the node's GPUs step on the same host memory
    host_gbps = hw.host_memory_gbps or DEFAULT_HOST_MEMORY_GBPS
    host_src = "the hardware profile's host_memory_gbps" if hw.host_memory_gbps else HOST_MEMORY_SOURCE
    seconds = node * per_element / (host_gbps * GB)
    kernel = "DeepSpeedCPUAdam" if Engine(engine) is Engine.deepspeed and impl is OptimizerImpl.fused else \
        f"torch AdamW ({impl.value})"
    note = f"{kernel} on the host: {hw.gpus_per_node} GPUs' shards at {host_gbps:g} GB/s ({host_src})"
    if offload is OffloadDevice.nvme and stage is ZeroStage.zero3:
        nvme = hw.nvme_gbps or DEFAULT_NVME_GBPS
        nvme_src = "the hardware profile's nvme_gbps" if hw.nvme_gbps else NVME_SOURCE
        seconds += 2 * node * NVME_BYTES / (nvme * GB)
        return StepTime(seconds, "NVMe + host", note + f"; states read from and written to NVMe at {nvme:g} GB/s "
                                                       f"({nvme_src})")
    return StepTime(seconds, "host", note)


def shard_elements(num_grad_params: int, stage: ZeroStage, dp: int) -> int:
    """Elements one GPU steps: the whole model at ZeRO-0 (every rank steps it all), else its 1/dp shard."""
    return num_grad_params if stage is ZeroStage.zero0 else -(-num_grad_params // dp)
