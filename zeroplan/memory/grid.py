"""The configuration grid: stages x GPU counts x micro-batches x checkpointing x offload of one scenario.

Pure: imports neither rich, typer nor yaml and does no I/O. Each row is what `estimate.evaluate` returns for that
configuration, computed by the same functions (`estimate.activations_for`, `estimate.stage_knobs`,
`memory.stage_base`, `memory.stage_peak`, which `evaluate` composes). The speed comes only from computing each
piece once for the axes it depends on: activations per (micro-batch, checkpointing), model states and engine
buffers per (stage, GPU count, offload); per configuration only the activations and the overhead are added.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from itertools import product
from typing import NamedTuple

from zeroplan.errors import ZeroplanError
from zeroplan.memory.estimate import (
    Scenario,
    activation_profile,
    reference_bytes,
    refused_stages,
    stage_knobs,
    tuned_base,
)
from zeroplan.memory.reference import with_reference
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    OffloadDevice,
    Parallelism,
    ZeroStage,
    fewest_nodes,
    spread_gpus,
)
from zeroplan.memory.stage import StageEstimate, stage_base, stage_peak
from zeroplan.memory.timeline import ActivationProfile

OffloadPair = tuple[OffloadDevice, OffloadDevice]  # (offload_optimizer, offload_param)

# Cheapest first, for choosing the best fitting configuration (offload and recomputation cost throughput).
OFFLOAD_COST = {OffloadDevice.none.value: 0, OffloadDevice.cpu.value: 1, OffloadDevice.nvme.value: 2}
RECOMPUTE_COST = {Checkpointing.none.value: 0, Checkpointing.selective.value: 1, Checkpointing.selective_op.value: 2,
                  Checkpointing.full.value: 3}


class GridRow(NamedTuple):
    """One configuration and its per-GPU peak; the four byte lines are those alive at the peak and sum to total."""

    stage: int
    gpus: int
    nodes: int
    micro_batch: int
    checkpointing: str
    offload_optimizer: str
    offload_param: str
    total_bytes: int
    model_states_bytes: int
    activations_bytes: int
    buffers_bytes: int
    overhead_bytes: int
    fits: bool | None
    headroom_bytes: int | None


def peak_lines(est: StageEstimate) -> tuple[int, int, int, int, int, bool | None, int | None]:
    """total, model states, activations, buffers, overhead (the lines alive at the peak), fits, headroom."""
    lines = est.gpu_bytes()
    return (est.total, lines["parameters"] + lines["gradients"] + lines["optimizer_states"], lines["activations"],
            lines["buffers"], est.overhead_bytes,
            est.fits, est.headroom_bytes)


def split_gpu_counts(gpu_counts: Sequence[int], gpus_per_node: int) -> tuple[list[Parallelism], tuple[int, ...]]:
    """The counts laid out on the fewest nodes that hold them evenly (memory.setup.spread_gpus, the rule every
    command uses), and the counts that do not split evenly over the nodes they need (12 fits, 9 on 8-GPU nodes
    does not)."""
    kept, skipped = [], []
    for gpus in gpu_counts:
        nodes = fewest_nodes(gpus, gpus_per_node)
        if gpus % nodes:
            skipped.append(gpus)
        else:
            kept.append(spread_gpus(gpus, nodes, gpus_per_node))
    return kept, tuple(skipped)


def offload_pairs(optimizer: Iterable[OffloadDevice], param: Iterable[OffloadDevice]) -> list[OffloadPair]:
    return list(product(optimizer, param))


def applied_knobs(knobs: DeepSpeedKnobs, stage: ZeroStage, pair: OffloadPair) -> DeepSpeedKnobs | None:
    """`knobs` with this offload, or None where DeepSpeed would not apply it at `stage` (stage_knobs would drop it)."""
    wanted = replace(knobs, offload_optimizer=pair[0], offload_param=pair[1])
    applied = stage_knobs(wanted, stage)
    return applied if (applied.offload_optimizer, applied.offload_param) == pair else None


def activation_sizes(scn: Scenario, micro_batches: Sequence[int],
                     checkpointings: Sequence[Checkpointing]) -> list[tuple[int, str, ActivationProfile]]:
    """(micro_batch, checkpointing, activations by part) for every pair, through `estimate.activation_profile`."""
    sizes = []
    for ckpt, mb in product(checkpointings, micro_batches):
        sizes.append((mb, ckpt.value, activation_profile(replace(scn, setup=replace(scn.setup, micro_batch=mb,
                                                                                        checkpointing=ckpt)))))
    return sizes


def gpus_per_node(scn: Scenario) -> int:
    """Node size for laying out GPU counts: the hardware's, else the scenario's own."""
    return scn.hardware.gpus_per_node if scn.hardware else scn.parallelism.gpus_per_node


def iter_grid(scn: Scenario, stages: Sequence[ZeroStage], gpu_counts: Sequence[int], micro_batches: Sequence[int],
              checkpointings: Sequence[Checkpointing], offloads: Sequence[OffloadPair]) -> Iterator[GridRow]:
    """Every valid configuration of the grid, in axis order (stage, GPUs, offload, checkpointing, micro-batch).

    Offload pairs DeepSpeed does not apply at a stage (any offload at ZeRO-0, NVMe or parameter offload below
    ZeRO-3) are left out rather than repeated as their no-offload twin. `scn`'s own micro-batch, checkpointing,
    GPU count and offload are replaced by the axes; everything else (sequence, recipe, knobs, hardware) is kept.
    """
    recipe, overheads, usable = scn.recipe, scn.overheads, scn.usable_bytes
    gpn = gpus_per_node(scn)
    clusters, skipped = split_gpu_counts(gpu_counts, gpn)
    if skipped:  # sweep_axes leaves them out and says so; a direct caller asked for them: the rule's own error
        spread_gpus(skipped[0], None, gpn)
    sizes = activation_sizes(scn, micro_batches, checkpointings)
    for stage in stages:
        knob_sets = [k for k in (applied_knobs(scn.knobs, stage, pair) for pair in offloads) if k is not None]
        for par, knobs in product(clusters, knob_sets):
            base = base_of(scn, recipe, stage, par, knobs)
            head = (int(stage), par.gpus, par.nodes)
            offload = (knobs.offload_optimizer.value, knobs.offload_param.value)
            for mb, ckpt, act in sizes:
                yield GridRow(*head, mb, ckpt, *offload, *peak_lines(stage_peak(base, act, overheads, usable)))


def base_of(scn: Scenario, recipe, stage: ZeroStage, par: Parallelism, knobs: DeepSpeedKnobs):
    """The StageBase `estimate.evaluate` builds for this configuration: DeepSpeed's, a fine-tune's (memory.tuned:
    frozen parameters without gradients or states) and a paged optimizer's host-backed states (memory.paged)."""
    ref = reference_bytes(scn, stage, par)  # a DPO reference copy (memory.reference)
    if scn.tuning is None and not recipe.optimizer.paged:
        return with_reference(stage_base(scn.model, recipe, stage, par, knobs), ref)
    from zeroplan.memory.paged import paged_base

    if scn.tuning is not None:
        base = tuned_base(replace(scn, parallelism=par, knobs=knobs), stage, recipe)
    else:
        base = stage_base(scn.model, recipe, stage, par, knobs)  # knobs as applied_knobs made them
    return with_reference(paged_base(base, recipe), ref)


def sweep_grid(scn: Scenario, stages: Sequence[ZeroStage], gpu_counts: Sequence[int], micro_batches: Sequence[int],
               checkpointings: Sequence[Checkpointing], offloads: Sequence[OffloadPair]) -> list[GridRow]:
    """iter_grid's rows as a list."""
    return list(iter_grid(scn, stages, gpu_counts, micro_batches, checkpointings, offloads))


def cheapest_key(row: GridRow) -> tuple:
    """Fewest GPUs, then no offload over CPU over NVMe, then less recomputation, then the largest micro-batch."""
    return (row.gpus, OFFLOAD_COST[row.offload_optimizer] + OFFLOAD_COST[row.offload_param],
            RECOMPUTE_COST[row.checkpointing], -row.micro_batch)


def best_per_stage(rows: Iterable[GridRow]) -> dict[int, GridRow | None]:
    """Per stage in the grid, the cheapest configuration that fits (cheapest_key); None when none fits."""
    best: dict[int, GridRow | None] = {}
    for row in rows:
        keep_best(best, row)
    return best


def keep_best(best: dict[int, GridRow | None], row: GridRow) -> None:
    """Update `best` (stage -> cheapest fitting row so far) with one more row: best_per_stage one row at a time."""
    current = best.setdefault(row.stage, None)
    if row.fits and (current is None or cheapest_key(row) < cheapest_key(current)):
        best[row.stage] = row


class GridAxes(NamedTuple):
    """The grid's axes, as evaluated."""

    stages: tuple[ZeroStage, ...]
    gpu_counts: tuple[int, ...]
    micro_batches: tuple[int, ...]
    checkpointings: tuple[Checkpointing, ...]
    offload_optimizers: tuple[OffloadDevice, ...]
    offload_params: tuple[OffloadDevice, ...]

    @property
    def size(self) -> int:
        """Configurations before dropping offloads a stage does not apply."""
        return (len(self.stages) * len(self.gpu_counts) * len(self.micro_batches) * len(self.checkpointings)
                * len(self.offload_optimizers) * len(self.offload_params))


class GridResult(NamedTuple):
    """A scenario, the axes swept over it, and one row per valid configuration."""

    scenario: Scenario
    axes: GridAxes
    rows: Iterable[GridRow]  # a list, or an iterator that streams them once (stream_axes)
    skipped_gpu_counts: tuple[int, ...] = ()  # GPU counts that do not split evenly over the nodes they need
    refused: tuple[str, ...] = ()  # stages a fine-tune's base cannot run at (estimate.refused_stages), and why


def sweep_axes(scn: Scenario, axes: GridAxes) -> GridResult:
    """sweep_grid over `axes`, with every optimizer offload paired with every parameter offload."""
    result = stream_axes(scn, axes)
    return result._replace(rows=list(result.rows))


def stream_axes(scn: Scenario, axes: GridAxes) -> GridResult:
    """sweep_axes with the rows as an iterator, made as they are read: millions of rows in constant memory."""
    offloads = offload_pairs(axes.offload_optimizers, axes.offload_params)
    gpn = gpus_per_node(scn)
    kept, skipped = split_gpu_counts(axes.gpu_counts, gpn)
    if not kept:
        raise ZeroplanError(f"none of the GPU counts ({', '.join(map(str, skipped))}) splits evenly over nodes of {gpn}")
    counts = tuple(par.gpus for par in kept)
    stages, refused = refused_stages(scn, axes.stages)
    rows = iter_grid(scn, stages, counts, axes.micro_batches, axes.checkpointings, offloads)
    return GridResult(scn, axes, rows, skipped, refused)
