"""Model states per GPU under each ZeRO stage (the ZeRO paper's p, g and k bytes over the data-parallel degree), and where offload puts them: host memory and NVMe.

Model states follow the ZeRO paper (Rajbhandari et al. 2019, arXiv:1910.02054, section 5 and Figure 1); offload
follows DeepSpeed's offload_config.py defaults (docs/formulas.md). Pure: no I/O; bytes are Python ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from zeroplan.memory.recipes import FP32_BYTES, Recipe
from zeroplan.memory.setup import DeepSpeedKnobs, OffloadDevice, ZeroStage
from zeroplan.memory.terms import Term, shard_numel
from zeroplan.validate import INPUT_CONFIG, Count, Size, Text


@dataclass(frozen=True, slots=True)
class ModelStates:
    """The ZeRO paper's three model-state terms on one GPU (and what offload moved to the CPU)."""

    parameters: int
    gradients: int
    optimizer_states: int
    cpu_bytes: int = 0  # this GPU's share of model states held in CPU memory

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_states


def model_state_bytes(
    num_params: int,
    recipe: Recipe,
    stage: ZeroStage,
    dp: int,
    offload_optimizer: OffloadDevice = OffloadDevice.none,
    offload_param: OffloadDevice = OffloadDevice.none,
) -> ModelStates:
    """Parameters, gradients and optimizer states per GPU (ZeRO paper, section 5.1).

        stage 0: p Psi      + g Psi      + k Psi
        stage 1: p Psi      + g Psi      + k Psi / N_d
        stage 2: p Psi      + g Psi / N_d + k Psi / N_d
        stage 3: p Psi / N_d + g Psi / N_d + k Psi / N_d

    Psi = parameters, N_d = data-parallel degree, (p, g, k) = the recipe's bytes per parameter.
    Offloaded optimizer states (stages 1-3) and parameters (stage 3) move to `cpu_bytes` (NVMe: off both).
    ZeRO-3 with offload_optimizer (CPU or NVMe) also keeps the gradient partitions on the CPU: DeepSpeed 0.19.8
    stage3.py sets `self.device = ... if not self.offload_optimizer else OffloadDeviceEnum.cpu` (sdist L333;
    deepspeedai/DeepSpeed@edaa722 L328) and allocates `grad_partitions_flat_buffer` (gradient_accumulation_dtype,
    Psi / N_d elements, pinned) on it (sdist L786-801; edaa722 L742-746); `partition_grads` copies each reduced
    partition there (edaa722 L1886-1930).
    """
    shard = shard_numel(num_params, dp)
    param_numel = shard if stage >= ZeroStage.zero3 else num_params
    grad_numel = shard if stage >= ZeroStage.zero2 else num_params
    opt_numel = shard if stage >= ZeroStage.zero1 else num_params
    params = param_numel * recipe.param_bytes
    optim = opt_numel * recipe.optimizer_bytes
    grads = grad_numel * recipe.grad_bytes
    on_cpu = 0
    if offload_param is not OffloadDevice.none:
        on_cpu += params if offload_param is OffloadDevice.cpu else 0
        params = 0
    if offload_optimizer is not OffloadDevice.none:
        on_cpu += optim if offload_optimizer is OffloadDevice.cpu else 0
        optim = 0
        if stage is ZeroStage.zero3:  # ZERO3_GRADS_ON_CPU: the gradient partition buffer is on the optimizer's device
            on_cpu, grads = on_cpu + grads, 0
    return ModelStates(parameters=params, gradients=grads, optimizer_states=optim, cpu_bytes=on_cpu)


NVME_PARAM_BUFFER_COUNT = 5  # offload_param.buffer_count default (offload_config.py)


NVME_PARAM_BUFFER_SIZE = 100_000_000  # offload_param.buffer_size default, elements


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSummary:
    """The counts the memory model needs from a model (or from a bare --params count)."""

    __pydantic_config__ = INPUT_CONFIG
    name: Text
    num_params: Count
    largest_layer_params: Annotated[Size, Field(description="0 = unknown (a bare count without --largest-layer)")] = 0
    num_embedding_params: Size = 0
    num_active_params: Size = 0
    small_param_numel: Annotated[Size, Field(description="elements in tensors under the ZeRO-3 persistence threshold")] = 0
    count_notes: Annotated[tuple[Text, ...], Field(description="what the count leaves out (a vision tower)")] = ()


def cpu_offload_terms(states: ModelStates, num_params: int, recipe: Recipe, dp: int, knobs: DeepSpeedKnobs) -> tuple[Term, ...]:
    """Host memory one GPU's rank needs for offload: offloaded states, fp32 grads, NVMe swap buffers."""
    terms = []
    if states.cpu_bytes:
        terms.append(Term(name="offloaded model states", bytes=states.cpu_bytes, source="offload_optimizer/offload_param device=cpu"))
    if knobs.offload_optimizer is not OffloadDevice.none and recipe.has_master:
        terms.append(
            Term(name="fp32 grad partition (pinned)", bytes=shard_numel(num_params, dp) * FP32_BYTES, source="stage_1_and_2.py / stage3.py with offload")
        )
    if knobs.offload_param is OffloadDevice.nvme:
        terms.append(
            Term(
                name="NVMe param swap buffers",
                bytes=NVME_PARAM_BUFFER_COUNT * NVME_PARAM_BUFFER_SIZE * recipe.param_bytes,
                source="offload_param buffer_count x buffer_size",
            )
        )
    return tuple(terms)


def nvme_bytes(num_params: int, recipe: Recipe, stage: ZeroStage, dp: int, knobs: DeepSpeedKnobs) -> int:
    """Bytes one rank swaps to NVMe (ZeRO-Infinity, stage 3 only)."""
    shard = shard_numel(num_params, dp)
    total = 0
    if knobs.offload_optimizer is OffloadDevice.nvme:
        total += shard * recipe.optimizer_bytes
    if knobs.offload_param is OffloadDevice.nvme:
        total += shard * recipe.param_bytes
    return total
