"""The fit of one layout x ZeRO stage x checkpointing x micro-batch: zeroplan's own mesh model, the number
`zeroplan estimate --tp T --pp P --cp C --ep E` prints for that run (memory.estimate.evaluate on a MeshModel).

What depends only on part of the layout is computed once and reused: the pipeline stages' shares of one rank
(memory.mesh.stage_shares: tp, pp, ep, vpp and the stack's vocabulary split only) for every cp, dp, stage, checkpointing and micro-batch; each
pipeline stage's activations (memory.mesh.mesh_activation_bytes: tp, cp, sequence parallelism, pp, checkpointing,
micro-batch and min(accumulation, pp), 1F1B's in-flight count; the whole accumulation and vpp under interleaved
1F1B) for every dp and ZeRO stage; each pipeline stage's
model states and buffers (memory.estimate.rank_bases: DeepSpeed's shares, or FSDP2's layout where FSDP2 runs the
layout) for every checkpointing and micro-batch. The peak is then memory.stage.busiest's, the function
memory.estimate.evaluate ends in: the largest stage_peak over the pipeline stages.
The largest fitting micro-batch is found by bisection over the divisors of the sequences per data-parallel rank:
peak memory grows with the micro-batch (activations are linear in it, and a pipeline stage's in-flight
micro-batches times the micro-batch, min(pp - i, accumulation) x b, never shrinks as b grows). That holds for 1F1B
only: interleaved 1F1B's rounds make its count jump with the accumulation, so the search evaluates its schedule
variants at every micro-batch instead (search.py). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from zeroplan.advise.layouts.space import Layout, divisors
from zeroplan.memory.estimate import Scenario, evaluate, rank_bases, stage_knobs
from zeroplan.memory.mesh import (
    MeshModel,
    StageShare,
    mesh_activation_bytes,
    stage_shares,
    tensor_parallel_layout,
)
from zeroplan.memory.setup import Checkpointing, Engine, OffloadDevice, Parallelism, ZeroStage
from zeroplan.memory.stage import StageBase, StageEstimate, busiest
from zeroplan.models.block import Decoder
from zeroplan.scenario.mesh import with_mesh

NONE = OffloadDevice.none
CACHE_LIMIT = 4096  # entries per cache below, then it starts over (a long-lived process planning many models)
# Shared by every search in the process (a benchmark over GPU counts reuses them): keyed by the frozen inputs.
_SHARES: dict[tuple, tuple[StageShare, ...]] = {}
_ACTIVATIONS: dict[tuple, tuple[int, ...]] = {}


def sized_as_fsdp2(layout: Layout, engine: Engine) -> bool:
    """FSDP2 sizes a layout under --engine fsdp2 (the search then offers torchtitan's (dp, tp) meshes only, at
    FSDP2's stages 2 and 3: space.py); under --engine deepspeed every layout keeps DeepSpeed's ZeRO shares, torchtitan's
    included (docs/advisor.md)."""
    return engine is Engine.fsdp2 and layout.pp == layout.cp == layout.ep == 1


def _cached(cache: dict, key, make):
    if key not in cache:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        cache[key] = make()
    return cache[key]


@dataclass
class Fitter:
    """Peak memory of layouts of one planned scenario, with the caches and the count of evaluations."""

    scn: Scenario  # the planned scenario: micro-batch 1, the precision the hardware runs, DeepSpeed engine
    decoder: Decoder
    budget: int  # bytes a plan may use (usable memory less the policy's free share)
    global_batch: int
    evaluations: int = 0
    _bases: dict[tuple, tuple[StageBase, ...]] = field(default_factory=dict)
    _knobs: dict[ZeroStage, object] = field(default_factory=dict)
    _meshes: dict[Layout, MeshModel] = field(default_factory=dict)
    _parallel: Parallelism | None = None
    _acts: dict | None = None
    model: str | None = None  # the preset name or config path (FSDP2's layout reads its modules)
    _modules: list | None = None

    @property
    def _par(self) -> Parallelism:
        if self._parallel is None:
            self._parallel = Parallelism(gpus=self.scn.parallelism.gpus, nodes=self.scn.parallelism.nodes)
        return self._parallel

    @classmethod
    def of(cls, scn: Scenario, model: str | None, budget: int, global_batch: int) -> Fitter:
        """Refuses (ZeroplanError, one line) what zeroplan's mesh model does not lay out, as `estimate --tp` does."""
        from zeroplan.models.mesh import Mesh
        from zeroplan.models.presets import load_model

        with_mesh(scn, Mesh(gpus=scn.parallelism.gpus), model)  # engine, fine-tune, model and family checks
        return cls(scn=scn, decoder=load_model(model).config.decoder(), budget=budget, global_batch=global_batch,
                   model=model)

    def shares(self, layout: Layout) -> tuple[StageShare, ...]:
        return _cached(_SHARES, (self.decoder, layout.tp, layout.pp, layout.ep, layout.stack, layout.vpp),
                       lambda: stage_shares(self.decoder, layout.mesh()))

    def per_rank(self, layout: Layout) -> int:
        """Sequences per data-parallel rank per optimizer step: micro-batch x accumulation."""
        return self.global_batch // layout.dp

    def scenario(self, layout: Layout, stage: ZeroStage, ckpt: Checkpointing, micro_batch: int) -> Scenario:
        """The run this configuration is: the mesh, no offload, DeepSpeed's overlap_comm default for the stage,
        accumulation filling the global batch. `zeroplan estimate` with these options prints the same peak."""
        return replace(self.scn, knobs=self._stage_knobs(stage), setup=self._setup(layout, ckpt, micro_batch),
                       parallelism=self._par, mesh=self._mesh(layout))

    def _stage_knobs(self, stage: ZeroStage):
        if stage not in self._knobs:  # what depends on the stage or the layout alone is built once
            knobs = self.scn.knobs
            self._knobs[stage] = stage_knobs(replace(knobs, offload_optimizer=NONE, offload_param=NONE,
                                                     overlap_comm=knobs.overlap_comm_for(stage)), stage)
        return self._knobs[stage]

    def _mesh(self, layout: Layout) -> MeshModel:
        """The layout's MeshModel as with_mesh builds it: with FSDP2's wrapping layout of the tensor-parallel rank
        where FSDP2 runs it (memory.mesh.mesh_bases then sizes FSDP2, not DeepSpeed's ZeRO)."""
        if layout not in self._meshes:
            fsdp2 = None
            if sized_as_fsdp2(layout, self.scn.engine):
                fsdp2 = tensor_parallel_layout(self._inventory(), self.scn.arch.num_layers, layout.mesh(), self.decoder)
            self._meshes[layout] = MeshModel(layout.mesh(), self.shares(layout), fsdp2)
        return self._meshes[layout]

    def _inventory(self):
        if self._modules is None:
            from zeroplan.models.params import module_inventory
            from zeroplan.models.presets import load_model

            self._modules = module_inventory(load_model(self.model).config)
        return self._modules

    def _setup(self, layout: Layout, ckpt: Checkpointing, micro_batch: int):
        return replace(self.scn.setup, checkpointing=ckpt, micro_batch=micro_batch,
                       grad_accum=self.per_rank(layout) // micro_batch)

    def peak(self, layout: Layout, stage: ZeroStage, ckpt: Checkpointing, micro_batch: int) -> StageEstimate:
        """memory.estimate.evaluate of self.scenario(...), from the caches (tests/test_layouts.py checks they agree):
        the activations and the stage bases are the only parts that depend on the configuration."""
        self.evaluations += 1
        acts = self._activations(layout, ckpt, micro_batch)
        return busiest(self._stage_bases(layout, stage), acts, self.scn.overheads, self.scn.usable_bytes)

    def exact(self, layout: Layout, stage: ZeroStage, ckpt: Checkpointing, micro_batch: int) -> StageEstimate:
        """The estimate as `zeroplan estimate` computes it, without the caches."""
        return evaluate(self.scenario(layout, stage, ckpt, micro_batch), stage)

    def _activations(self, layout: Layout, ckpt: Checkpointing, micro_batch: int) -> tuple[int, ...]:
        if self._acts is None:  # one table per model and setup, shared by every fitter of the process
            self._acts = _cached(_ACTIVATIONS, (self.scn.arch, self.scn.setup), dict)
        m = self.per_rank(layout) // micro_batch
        # m whole under a pipeline: PyTorch's pipelining keeps a receive buffer per micro-batch (memory/pipelining.py),
        # so m beyond pp changes the figure even where 1F1B's in-flight count, min(pp - r, m), does not; without a
        # pipeline the accumulation does not change the activations (one key for every m)
        m = m if layout.pp > 1 else 1
        key = (ckpt, micro_batch, m, layout.tp, layout.cp,
               layout.sequence_parallel, layout.pp, layout.stack, layout.vpp)
        if key not in self._acts:
            self._acts[key] = mesh_activation_bytes(self._mesh(layout), self.scn.arch,
                                                    self._setup(layout, ckpt, micro_batch))
        return self._acts[key]

    def _stage_bases(self, layout: Layout, stage: ZeroStage) -> tuple[StageBase, ...]:
        key = (layout, stage)
        if key not in self._bases:  # estimate.rank_bases of self.scenario(...): it reads no micro-step
            scn = replace(self.scn, knobs=self._stage_knobs(stage), parallelism=self._par, mesh=self._mesh(layout))
            self._bases[key] = rank_bases(scn, stage)
        return self._bases[key]

    def fits(self, est: StageEstimate) -> bool:
        return est.total <= self.budget

    def micro_batches(self, layout: Layout) -> list[int]:
        """The micro-batches that keep micro-batch x accumulation x dp = global batch exact: divisors of per_rank."""
        return divisors(self.per_rank(layout))  # ascending, in O(sqrt n): 2^24 sequences per rank cost 4,096 steps

    def largest(self, layout: Layout, stage: ZeroStage, ckpt: Checkpointing,
                at_one: StageEstimate | None = None) -> tuple[int, StageEstimate]:
        """(the largest fitting micro-batch, its estimate), or (0, the estimate at micro-batch 1) if none fits."""
        sizes = self.micro_batches(layout)
        first = at_one or self.peak(layout, stage, ckpt, 1)
        if not self.fits(first):
            return 0, first
        lo, hi, best = 0, len(sizes) - 1, first  # sizes[lo] fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            est = self.peak(layout, stage, ckpt, sizes[mid])
            if self.fits(est):
                lo, best = mid, est
            else:
                hi = mid - 1
        return sizes[lo], best
