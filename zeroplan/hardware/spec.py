"""One accelerator and the node it sits in (HardwareSpec), and how its GPUs talk (Topology).

The numbers come from configs/hardware/*.yaml, each with its datasheet or measurement. Pure: no I/O.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Literal

from pydantic import Field

from zeroplan.validate import INPUT_CONFIG, Count, Flag, Name, Real, Text


# Past any real device, the arithmetic breaks (1e308 GiB is an infinite byte count; a rate of 1e-30 divides by
# zero): a GPU holds less than 2^20 GiB; a rate (TFLOPS, TB/s, GB/s) is between 1e-3 and 1e7 of its unit, a latency at
# most 1e7 us; the CUDA context and NCCL at most 1024 GiB, as --cuda-context-gib and --nccl-gib (docs/hardening.md).
MAX_DEVICE_GIB = 2**20
MIN_RATE, MAX_RATE = 1e-3, 1e7
MAX_OVERHEAD_GIB = 1024


class Topology(str, Enum):
    """How the data-parallel GPUs are connected (planning defaults per topology: docs/hardware.md)."""

    nvlink = "nvlink"  # one node, GPUs on the node's fast fabric (NVLink/NVSwitch; xGMI on AMD)
    pcie = "pcie"  # one node, GPUs talk over PCIe only
    multinode = "multinode"  # several nodes: rings cross the NICs


@dataclass(frozen=True, slots=True, kw_only=True)
class HardwareSpec:
    """One accelerator model and the node it usually sits in. Numbers come from configs/hardware/*.yaml
    (hardware/presets.py validates them)."""

    __pydantic_config__ = INPUT_CONFIG
    name: Name
    source: Annotated[Text, Field(description="datasheet / measurement the numbers come from")]
    memory_gib: Annotated[Real, Field(gt=0, le=MAX_DEVICE_GIB, description="capacity as software sees it (nvidia-smi total), GiB")]
    bf16_tflops: Annotated[Real, Field(ge=0, le=MAX_RATE, description="dense bf16 tensor TFLOPS (0 = no bf16)")]
    fp16_tflops: Annotated[Real, Field(ge=MIN_RATE, le=MAX_RATE, description="dense fp16 tensor TFLOPS")]
    fp32_tflops: Annotated[Real, Field(ge=MIN_RATE, le=MAX_RATE, description="dense fp32 (non-tensor) TFLOPS")]
    hbm_bandwidth_tbps: Annotated[Real, Field(ge=MIN_RATE, le=MAX_RATE, description="memory bandwidth, TB/s")]
    supports_bf16: Flag
    gpus_per_node: Count
    intra_node_fabric: Literal["nvlink", "pcie", "xgmi"]
    intra_node_busbw_gbps: Annotated[Real, Field(ge=MIN_RATE, le=MAX_RATE, description="measured large-message collective bus bandwidth in a node, GB/s")]
    intra_node_alpha_us: Annotated[Real, Field(gt=0, le=MAX_RATE, description="latency of one collective inside a node, microseconds")]
    pcie_busbw_gbps: Annotated[Real, Field(ge=MIN_RATE, le=MAX_RATE, description="collective bus bandwidth when the node's GPUs talk over PCIe only, GB/s")]
    pcie_alpha_us: Annotated[Real, Field(gt=0, le=MAX_RATE, description="latency of one collective over PCIe, microseconds")]
    nic_gbps_per_gpu: Annotated[Real, Field(ge=MIN_RATE, le=MAX_RATE, description="inter-node NIC bandwidth per GPU, GB/s (decimal bytes)")]
    inter_node_alpha_us: Annotated[Real, Field(gt=0, le=MAX_RATE, description="latency of one collective that crosses nodes, microseconds")]
    host_link_gbps: Annotated[Real, Field(ge=MIN_RATE, le=MAX_RATE, description="GPU<->host bandwidth per direction, GB/s (PCIe)")]
    default_mfu: Annotated[Real, Field(gt=0, le=1, description="model FLOPs utilisation assumed when none is given")]
    cuda_context_gib: Annotated[Real, Field(ge=0, le=MAX_OVERHEAD_GIB, description="CUDA context + kernels per process, GiB")]
    nccl_gib: Annotated[Real, Field(ge=0, le=MAX_OVERHEAD_GIB, description="NCCL communicator buffers per process, GiB")]
    gpu_arch: Annotated[str | None, Field(pattern=r"^(sm[0-9]{2,3}|gfx[0-9a-f]{3,4})$", description=(
        "the GPU architecture as bitsandbytes' build tables name it: sm80 = NVIDIA compute capability 8.0, gfx942 "
        "= AMD CDNA3; null = unknown (docs/hardware.md, bitsandbytes)"))] = None
    host_memory_gbps: Annotated[Real | None, Field(ge=MIN_RATE, le=MAX_RATE, description=(
        "host memory bandwidth per node, GB/s, for the CPU optimizer step; null = perf.optimizer_step's named "
        "default"))] = None
    nvme_gbps: Annotated[Real | None, Field(ge=MIN_RATE, le=MAX_RATE, description=(
        "NVMe bandwidth per node, GB/s, for ZeRO-Infinity's optimizer; null = perf.optimizer_step's named default"))] = None

    def __post_init__(self) -> None:
        if self.supports_bf16 != (self.bf16_tflops > 0):
            raise ValueError(
                f"supports_bf16 ({self.supports_bf16}) disagrees with bf16_tflops ({self.bf16_tflops}): "
                "bf16_tflops is 0 exactly when the hardware has no bf16"
            )
