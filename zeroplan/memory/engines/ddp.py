"""DistributedDataParallel (stage 0) and DDP + ZeroRedundancyOptimizer (stage 1), per rank.

Sources (PyTorch 2.13): torch/nn/parallel/distributed.py and torch/csrc/distributed/c10d/reducer.cpp (buckets:
each holds a flat copy of its gradients, unless `gradient_as_bucket_view=True` makes `.grad` views into them);
torch/distributed/optim/zero_redundancy_optimizer.py `_partition_parameters` (whole tensors, sorted largest
first, each to the rank with the fewest elements so far). Pure: no I/O.
"""

from __future__ import annotations

from math import prod

from zeroplan.memory.engines.layout import ModelLayout
from zeroplan.memory.engines.storage import Storage
from zeroplan.memory.setup import EngineOptions, ZeroStage
from zeroplan.memory.states import ModelStates
from zeroplan.memory.terms import Phase, Setting, Term

DDP_SOURCE = "torch/nn/parallel/distributed.py, c10d/reducer.cpp"
ZERO_SOURCE = "torch/distributed/optim/zero_redundancy_optimizer.py: _partition_parameters"


def greedy_partition(numels: list[int], world: int) -> list[int]:
    """Elements per rank under ZeroRedundancyOptimizer: largest tensor first, each to the least-loaded rank (lowest index on ties)."""
    sizes = [0] * world
    for n in sorted(numels, reverse=True):
        rank = sizes.index(min(sizes))
        sizes[rank] += n
    return sizes


def ddp_states(num_params: int, layout: ModelLayout, store: Storage, stage: ZeroStage, dp: int) -> tuple[ModelStates, tuple[str, ...]]:
    """Full parameters and gradients on every rank; optimizer states whole (stage 0) or the busiest rank's partition (stage 1)."""
    opt_numel, notes = num_params, ()
    if stage is ZeroStage.zero1 and dp > 1:
        sizes = greedy_partition([prod(s) for s in layout.tensors()], dp)
        opt_numel = max(sizes)
        if max(sizes) != min(sizes):
            notes = (f"ZeroRedundancyOptimizer ranks hold {min(sizes):,} to {max(sizes):,} parameters' states "
                     f"(ideal {num_params / dp:,.0f}); the figures are the busiest rank's",)
    states = ModelStates(parameters=num_params * store.param, gradients=num_params * store.grad,
                         optimizer_states=opt_numel * store.optimizer)
    return states, notes


def ddp_buffers(num_params: int, store: Storage, options: EngineOptions) -> tuple[Term, ...]:
    """The reducer's buckets: a second gradient-sized buffer, g Psi, allocated at construction, unless gradient_as_bucket_view."""
    if options.gradient_as_bucket_view:
        return ()
    return (Term(name="DDP gradient buckets", bytes=num_params * store.grad, phase=Phase.always,
                 source="reducer.cpp: bucket contents, a flat copy of every gradient"),)


def ddp_settings(stage: ZeroStage, options: EngineOptions) -> tuple[Setting, ...]:
    settings = [Setting("wrapper", "DistributedDataParallel", DDP_SOURCE),
                Setting("gradient_as_bucket_view", str(options.gradient_as_bucket_view).lower(), DDP_SOURCE)]
    if stage is ZeroStage.zero1:
        settings.append(Setting("optimizer", "ZeroRedundancyOptimizer (whole tensors, largest first)", ZERO_SOURCE))
    return tuple(settings)
