"""bitsandbytes' paged optimizers: where their states live, and what stays in PyTorch's GPU memory.

bitsandbytes@95f9af309d4d5793847169c39288dcd3fcbdf564, bitsandbytes/optim/optimizer.py:374-390
(Optimizer8bit.get_state_buffer): with is_paged, a state tensor of at least 1e5 elements is allocated with
F.get_paged (cudaMallocManaged, CUDA unified memory) instead of torch.zeros_like; smaller ones stay ordinary
GPU tensors. Unified memory is outside PyTorch's caching allocator: the pages are on the GPU while it has
room, and the driver evicts them to host memory when it runs out (the QLoRA paper, section 3, "Paged
Optimizers"), so they never make a step fail for lack of GPU memory; they cost transfers instead.
zeroplan therefore leaves the paged states out of the GPU peak and lists them as host-backed memory.
DeepSpeed hands its optimizer one flat partition per group, so under DeepSpeed all of it is paged.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.memory.recipes import Recipe
from zeroplan.memory.stage import StageBase, phase_totals
from zeroplan.memory.terms import Term

PAGED_MIN_NUMEL = 100_000  # get_state_buffer: p.numel() < 1e5 stays a plain GPU tensor


def paged_base(base: StageBase, recipe: Recipe) -> StageBase:
    """`base` with the optimizer's m and v (not the fp32 master) moved from the GPU to unified memory."""
    if not recipe.optimizer.paged or base.states.optimizer_states == 0:
        return base
    state_share = 1 - recipe.master_bytes / recipe.optimizer_bytes if recipe.optimizer_bytes else 0
    paged = int(base.states.optimizer_states * state_share)
    states = replace(base.states, optimizer_states=base.states.optimizer_states - paged)
    term = Term(name="paged optimizer states (unified memory: on the GPU while room, evicted under pressure)",
                bytes=paged, source="bitsandbytes optim/optimizer.py get_state_buffer (is_paged)")
    backward, step = phase_totals(states, base.buffers)
    return replace(base, states=states, cpu_terms=base.cpu_terms + (term,), backward_bytes=backward, step_bytes=step,
                   notes=base.notes + ("paged optimizer states are outside the GPU peak (docs/finetune.md)",))
