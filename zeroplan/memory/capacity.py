"""Capacity questions: the largest micro-batch, the fewest GPUs, the largest model that fit, per stage.

Pure: searches over `estimate.evaluate`, the same function the estimate uses. Each search relies on the
peak being monotone in the searched quantity (property-tested in tests/test_invariants.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from pydantic import Field

from zeroplan.frozen import Frozen
from zeroplan.memory.estimate import Scenario, evaluate
from zeroplan.memory.setup import Parallelism, ZeroStage
from zeroplan.memory.states import ModelSummary
from zeroplan.validate import MAX_MODEL_COUNTS

# The share of usable GPU memory a plan leaves free beyond the modelled peak (which already holds the CUDA
# context, NCCL and the 5 % fragmentation margin): allocator spikes and what the model leaves out, the low end of
# the 5-10 % in docs/hardware.md. One setting: the advisor's default headroom (advise.policy min_headroom_fraction)
# and check's low-headroom warning (check.rules.memory) both read it, so advice never fails `check --strict`.
HEADROOM_FRACTION = 0.05
HEADROOM_SOURCE = ("zeroplan judgment: the low end of the 5-10 % allocator margin of docs/hardware.md, on top of the "
                   "modelled fragmentation; check's low-headroom threshold is the same number (docs/checks.md)")
MAX_MICRO_BATCH = 256  # the search's upper end; "256" means "at least 256"
MAX_GPUS = 1024
MAX_LAYERS_FACTOR = 1024  # a model at most this many times deeper than the given one
# ... and no deeper than any real model (zeroplan.validate's bound on a file's layers): each step of the depth search
# costs time in proportion to the depth, and 126 x 1024 layers (Llama 3.1 405B) took 50 s. "2048" means "at least".
MAX_SCAN_LAYERS = MAX_MODEL_COUNTS["num_hidden_layers"]


def _largest_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """Largest x in [lo, hi] with ok(x), for ok true then false; lo - 1 if none."""
    if not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def budget_bytes(usable_bytes: int, free_fraction: float = 0.0) -> int:
    """Bytes a plan may use: the usable capacity less `free_fraction` of it kept free (rounded up)."""
    return usable_bytes - math.ceil(usable_bytes * free_fraction)


def _fits(scn: Scenario, stage: ZeroStage, free_fraction: float = 0.0) -> bool:
    est = evaluate(scn, stage)
    if est.usable_bytes is None:
        from zeroplan.errors import ZeroplanError

        raise ZeroplanError("capacity questions need a hardware profile (--hardware)")
    return est.total <= budget_bytes(est.usable_bytes, free_fraction)


def max_micro_batch(scn: Scenario, stage: ZeroStage, limit: int = MAX_MICRO_BATCH, *, free_fraction: float = 0.0) -> int:
    """Largest micro-batch per GPU in 1..limit that fits at `stage` (keeping free_fraction free); 0 if none does."""
    def ok(mb: int) -> bool:
        return _fits(replace(scn, setup=replace(scn.setup, micro_batch=mb)), stage, free_fraction)

    return max(_largest_true(1, limit, ok), 0)


def gpu_layouts(gpus_per_node: int, limit: int = MAX_GPUS) -> list[Parallelism]:
    """Candidate clusters in increasing size: 1..gpus_per_node GPUs in one node, then whole nodes."""
    single = [Parallelism(gpus=g, nodes=1) for g in range(1, min(gpus_per_node, limit) + 1)]
    whole = [Parallelism(gpus=n * gpus_per_node, nodes=n) for n in range(2, limit // gpus_per_node + 1)]
    return single + whole


def min_gpus(scn: Scenario, stage: ZeroStage, limit: int = MAX_GPUS, *, free_fraction: float = 0.0) -> Parallelism | None:
    """Fewest GPUs (whole nodes past one) on which `stage` fits (keeping free_fraction free); None if not even
    `limit` GPUs do."""
    gpn = scn.hardware.gpus_per_node if scn.hardware else scn.parallelism.gpus_per_node
    layouts = gpu_layouts(gpn, limit)

    def fits_at(i: int) -> bool:
        return _fits(replace(scn, parallelism=layouts[i]), stage, free_fraction)

    # Per-GPU memory never grows with more GPUs, except NCCL's buffers appearing at 2: check 1 apart.
    if fits_at(0):
        return layouts[0]
    first_fail = _largest_true(1, len(layouts) - 1, lambda i: not fits_at(i))
    return layouts[first_fail + 1] if first_fail + 1 < len(layouts) else None


class ScaledModel(Frozen):
    """A model scaled in depth: the given one's embeddings and per-layer shape, `num_layers` layers."""

    num_layers: int
    num_params: int = Field(description="parameters of the scaled model")


def scale_depth(scn: Scenario, factor_num: int, factor_den: int) -> Scenario:
    """`scn` with the model's layer count scaled by factor_num/factor_den (at least one layer)."""
    model, arch = scn.model, scn.arch
    if arch is None:
        num = max(1, model.num_params * factor_num // factor_den)
        return replace(scn, model=replace(model, num_params=num, name=f"{num:,} params"))
    layers = max(1, arch.num_layers * factor_num // factor_den)
    per_layer = (model.num_params - model.num_embedding_params) // arch.num_layers
    num = model.num_embedding_params + per_layer * layers
    scaled = ModelSummary(
        name=f"{model.name} x{layers}/{arch.num_layers} layers", num_params=num,
        largest_layer_params=model.largest_layer_params, num_embedding_params=model.num_embedding_params,
        num_active_params=num, small_param_numel=model.small_param_numel * layers // arch.num_layers,
    )
    return replace(scn, model=scaled, arch=replace(arch, num_layers=layers))


def max_model(scn: Scenario, stage: ZeroStage) -> ScaledModel | None:
    """The deepest version of the model (same width, embeddings and per-layer shape) that fits at `stage`.

    With a bare parameter count, the count itself is scaled (model states and buffers only).
    """
    base = scn.arch.num_layers if scn.arch else 1000  # bare counts: search in 0.1 % steps
    top = max(base, min(base * MAX_LAYERS_FACTOR, MAX_SCAN_LAYERS)) if scn.arch else base * MAX_LAYERS_FACTOR
    best = _largest_true(1, top, lambda n: _fits(scale_depth(scn, n, base), stage))
    if best < 1:
        return None
    scaled = scale_depth(scn, best, base)
    return ScaledModel(num_layers=scaled.arch.num_layers if scaled.arch else 0, num_params=scaled.model.num_params)
