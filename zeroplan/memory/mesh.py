"""Model states of one rank of a tensor x pipeline x context x data (x expert) mesh, from the module descriptions.

What each parallelism splits (docs/parallelism.md has the table and its sources):
- tensor parallelism (Megatron-LM's ColumnParallelLinear / RowParallelLinear, PyTorch's ColwiseParallel /
  RowwiseParallel): a column linear (q/k/v, gate/up) splits its out-features, weight and bias; a row linear
  (o, down) splits its in-features and keeps its bias whole; the token embedding and the LM head are
  vocab-parallel (split on the vocabulary); norms, qk-norms, routers, position tables, linears kept whole and
  other tensors are replicated. Experts split their intermediate width by tp (Megatron's expert-tensor size
  defaults to tp) and their count by ep.
- pipeline parallelism: pp x chunks contiguous blocks of layers (equal where they divide; else torchtitan's default
  split, or Megatron-LM's given first / last stage counts: models.mesh.stage_layer_counts) (chunks = vpp model chunks per rank under
  an interleaved schedule, rank r holding stages r, r + pp, ...; 2 under zbv, rank r holding r and 2 pp - 1 - r),
  the embedding (and any extra non-layer tensors) on the rank of the first stage, the final norm and the head on
  the rank of the last; a tied head keeps its own copy of the embedding on another rank (Megatron-LM's shared
  word embeddings).
- ZeRO / FSDP shard over the ranks that hold the same tensors: dp x cp for dense tensors (the context-parallel
  ranks hold the same weights; Megatron's distributed optimizer and torchtitan's FSDP mesh `dp_shard_cp` shard
  over both), dp x cp / ep for the experts (their own data-parallel group).
A split that does not divide gives the first ranks ceil(n / t) elements, torch.chunk's (and DTensor's) rule; the
busiest rank is reported. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from zeroplan.errors import ZeroplanError
from zeroplan.memory.recipes import Recipe
from zeroplan.memory.setup import DeepSpeedKnobs, ZeroStage
from zeroplan.memory.states import ModelStates, model_state_bytes
from zeroplan.models.block import Decoder
from zeroplan.models.mesh import Mesh
from zeroplan.models.params.decoder import final_norm_name, layer_modules, layer_sequence, outer_modules
from zeroplan.models.params.modules import COLUMN, EMBEDDING_KIND, EXPERTS_KIND, NORM, ROW, Module


def _split(n: int, t: int) -> int:
    return -(-n // t)


def tensor_numel(m: Module, shape: tuple[int, ...], tp: int, ep: int, hidden: int, vocab: int) -> int:
    """Elements of one of `m`'s tensors on the busiest rank of a tp x ep group (the rules in the module docstring)."""
    return prod(local_shape(m, shape, tp, ep, hidden, vocab))


def local_shape(m: Module, shape: tuple[int, ...], tp: int, ep: int, hidden: int, vocab: int) -> tuple[int, ...]:
    """The shape of one of `m`'s tensors on the busiest rank of a tp x ep group (DTensor's local shard)."""
    dims = list(shape)
    if m.kind == COLUMN:
        i = max(j for j, d in enumerate(dims) if d == m.out_features) if m.out_features in dims else 0
        dims[i] = _split(dims[i], tp)
    elif m.kind == ROW and len(dims) >= 2 and m.in_features in dims:
        i = dims.index(m.in_features)
        dims[i] = _split(dims[i], tp)
    elif m.kind == EMBEDDING_KIND and vocab in dims:  # vocab-parallel table or head; position tables stay whole
        i = dims.index(vocab)
        dims[i] = _split(dims[i], tp)
    elif m.kind == EXPERTS_KIND:
        dims[0] = _split(dims[0], ep)
        widths = [j for j in range(1, len(dims)) if dims[j] != hidden]
        if widths:
            dims[widths[0]] = _split(dims[widths[0]], tp)
    return tuple(dims)


@dataclass(frozen=True, slots=True)
class StageShare:
    """The elements one rank of one pipeline stage holds (tensor- and expert-parallel split applied)."""

    index: int  # pipeline rank, 0 = first
    first_layer: int  # of its first chunk
    last_layer: int  # of its last chunk, inclusive
    chunks: tuple[tuple[int, int], ...]  # (first, last) layers of each model chunk; one without interleaving
    dense: int  # elements sharded over the dense data-parallel group (dp x cp)
    experts: int  # elements sharded over the expert data-parallel group (dp x cp / ep)
    largest_module: int  # the largest module's own elements on this rank (DeepSpeed's largest-layer unit)
    norm: int  # elements of norms on this rank (the small tensors ZeRO-3 may keep whole)
    # Gradient elements beyond the shard: PyTorch's vocab-parallel embedding (RowwiseParallel, a Shard(0) weight)
    # gets a Replicate gradient of the whole V x d table on every tensor-parallel rank (measured with torch 2.13,
    # validation/measure_tp.py); FSDP2 / ZeRO-2+ reduce-scatter it to the shard.
    whole_embedding_grad: int = 0

    @property
    def total(self) -> int:
        return self.dense + self.experts


def _own(m: Module, mesh: Mesh, dec: Decoder) -> int:
    shapes = m.shapes or ((m.params,),)
    tp = 1 if _whole_embedding(m, mesh, dec) else mesh.tp
    return sum(tensor_numel(m, s, tp, mesh.ep, dec.hidden, dec.vocab) for s in shapes)


def _whole_embedding(m: Module, mesh: Mesh, dec: Decoder) -> bool:
    """The token table kept whole on every tensor-parallel rank (DeepSpeed AutoTP replaces linears only)."""
    return not mesh.vocab_parallel_embedding and m.kind == EMBEDDING_KIND and m.name.endswith(dec.embed)


def stage_shares(dec: Decoder, mesh: Mesh) -> tuple[StageShare, ...]:
    """One StageShare per pipeline rank of `dec` on `mesh` (layers split as models.mesh.stage_layer_counts says);
    the embedding on the rank of the first stage, the final norm and head on the rank of the last."""
    from zeroplan.memory.activations.pipeline import head_rank, rank_layers

    from zeroplan.models.mesh import split_problems

    layers = layer_sequence(dec)
    if found := split_problems(mesh, len(layers)):
        raise ZeroplanError(found[0])
    outer, norm_name = outer_modules(dec), final_norm_name(dec)
    last_names = {dec.head} | ({norm_name} if norm_name else set())
    modules_of = {}
    shares = []
    for s, chunks in enumerate(rank_layers(len(layers), mesh)):
        mods: list[Module] = []
        for first, last in chunks:
            for layer in layers[first:last + 1]:
                key = id(layer)
                if key not in modules_of:
                    modules_of[key] = layer_modules(layer, dec)
                mods += modules_of[key]
        for m in outer:
            on_last = m.name in last_names
            if (s == head_rank(mesh)) if on_last else (s == 0):
                # A tied head shares the embedding's weight on one rank; on another rank it holds a copy.
                if not (m.tied and head_rank(mesh) == 0):
                    mods.append(m._replace(tied=False))
        own = [(m, _own(m, mesh, dec)) for m in mods]
        table = [(m, n) for m, n in own if m.kind == EMBEDDING_KIND and m.name.endswith(dec.embed) and mesh.tp > 1
                 and mesh.vocab_parallel_embedding]
        shares.append(StageShare(
            index=s, first_layer=chunks[0][0], last_layer=chunks[-1][1], chunks=chunks,
            dense=sum(n for m, n in own if m.kind != EXPERTS_KIND),
            experts=sum(n for m, n in own if m.kind == EXPERTS_KIND),
            largest_module=max((n for _, n in own), default=0),
            norm=sum(n for m, n in own if m.kind == NORM),
            whole_embedding_grad=sum(m.params - n for m, n in table)))
    return tuple(shares)


def shard_groups(mesh: Mesh) -> tuple[int, int]:
    """(dense, expert) data-parallel group sizes ZeRO / FSDP shard over: dp x cp and dp x cp / ep."""
    dense = mesh.dp * mesh.cp
    return dense, max(1, dense // mesh.ep)


def share_states(share: StageShare, mesh: Mesh, recipe: Recipe, stage: ZeroStage,
                 knobs: DeepSpeedKnobs | None = None) -> ModelStates:
    """Parameters, gradients and optimizer states of one rank of `share`'s stage: the ZeRO paper's terms
    (memory.states.model_state_bytes) over the dense group for dense tensors, over the expert group for experts."""
    knobs = knobs or DeepSpeedKnobs()
    dense_dp, expert_dp = shard_groups(mesh)
    parts = [model_state_bytes(n, recipe, stage, dp, knobs.offload_optimizer, knobs.offload_param)
             for n, dp in ((share.dense, dense_dp), (share.experts, expert_dp)) if n]
    whole = share.whole_embedding_grad * recipe.grad_bytes if stage < ZeroStage.zero2 else 0
    return ModelStates(parameters=sum(p.parameters for p in parts), gradients=sum(p.gradients for p in parts) + whole,
                       optimizer_states=sum(p.optimizer_states for p in parts),
                       cpu_bytes=sum(p.cpu_bytes for p in parts))


def busiest(shares: tuple[StageShare, ...], mesh: Mesh, recipe: Recipe, stage: ZeroStage,
            knobs: DeepSpeedKnobs | None = None) -> StageShare:
    """The stage whose rank holds the most model-state bytes at `stage` (the first of equals)."""
    return max(shares, key=lambda s: (share_states(s, mesh, recipe, stage, knobs).total, -s.index))


def tensor_parallel_layout(modules: list[Module], num_layers: int, mesh: Mesh, dec: Decoder):
    """The FSDP2 wrapping layout (memory.engines.layout) of one tensor-parallel rank's local shards: what
    fully_shard over the dp dimension of a (dp, tp) DeviceMesh shards (torchtitan's 2-D mesh)."""
    from zeroplan.memory.engines.layout import layout_from_modules

    local = []
    for m in modules:
        tp = 1 if _whole_embedding(m, mesh, dec) else mesh.tp
        shapes = tuple(local_shape(m, s, tp, mesh.ep, dec.hidden, dec.vocab) for s in m.shapes)
        local.append(m._replace(shapes=shapes, params=sum(prod(s) for s in shapes)) if shapes else m)
    return layout_from_modules(local, num_layers)


@dataclass(frozen=True, slots=True)
class MeshModel:
    """A model laid out on a mesh: the mesh and each pipeline stage's share of one rank; `layout`, the tensor-parallel
    rank's FSDP2 layout when the engine is FSDP2 (None: DeepSpeed's ZeRO)."""

    mesh: Mesh
    shares: tuple[StageShare, ...]
    layout: object | None = None

    def notes(self) -> list[str]:
        dense, expert = shard_groups(self.mesh)
        notes = [f"mesh {self.mesh.describe()}; ZeRO/FSDP shard over the data-parallel group of dp x cp = {dense} "
                 "ranks (not the GPU count)"]
        if any(s.experts for s in self.shares):
            notes.append(f"experts: {self.mesh.ep}-way expert parallel, sharded over their own data-parallel group "
                         f"of dp x cp / ep = {expert} ranks; experts split by tp too (Megatron's expert-tensor size)")
        if self.mesh.tp > 1:
            vocab = ("embedding and head vocab-parallel" if self.mesh.vocab_parallel_embedding else
                     "the head's weight split, the token embedding whole (DeepSpeed AutoTP, Hugging Face's tp_plan)")
            notes.append(f"tensor parallel {self.mesh.tp}: column linears split out-features, row linears "
                         f"in-features (their biases whole), {vocab}; norms, qk-norms, "
                         "routers, position tables and unsplit linears replicated (docs/parallelism.md)")
        if self.mesh.pp > 1:
            counts = [b - a + 1 for s in self.shares for a, b in s.chunks]
            chunks = self.mesh.chunks
            per = str(counts[0]) if len(set(counts)) == 1 else f"{', '.join(map(str, counts))} (uneven)"
            layout = (f"pipeline {self.mesh.pp} stages of {per} layers" if chunks == 1 else
                      f"pipeline {self.mesh.pp} ranks of {chunks} model chunks of {per} layers (rank 0 holds layers "
                      f"{layer_ranges(self.shares[0])})")
            head = "rank 0 (the V of zbv)" if self.mesh.schedule.value == "zbv" else "the last"
            notes.append(f"{layout}, embedding on the first rank, final norm and head on {head} (a tied head keeps "
                         "a copy on another rank); figures are the busiest rank's")
            if self.mesh.pipe_partition:
                notes.append(pipe_split_note(self.mesh.pipe_partition))
        return notes


def pipe_split_note(method: str) -> str:
    """Which split DeepSpeed's PipelineModule gave the layers, in words (models.partition)."""
    how = {"uniform": "ds_utils.partition_uniform over the items' count",
           "parameters": "ds_utils.partition_balanced over the items' parameter counts"}.get(
        method, "ds_utils.partition_balanced over weights of 1 for the decoder layers, 0 for the rest (the regex "
                "assumed to match the decoder layers only)")
    return (f"layers split as DeepSpeed's PipelineModule partition_method '{method}' splits them: {how}, the items "
            "being the embedding, each decoder layer, the final norm and the head (Megatron-DeepSpeed's GPTModelPipe "
            "order, parameter-free functions left out; models/partition.py)")


def layer_ranges(share: StageShare) -> str:
    return ", ".join(f"{a}-{b}" for a, b in share.chunks)


def share_base(model: MeshModel, share: StageShare, recipe: Recipe, stage: ZeroStage, par, knobs: DeepSpeedKnobs,
               hidden: int):
    """memory.stage.stage_base for one rank of `share`'s pipeline stage: its states (share_states) and DeepSpeed's
    buffers over the dense data-parallel group for that rank's elements."""
    from zeroplan.memory.buffers import engine_buffers
    from zeroplan.memory.optimizer_step import deepspeed_temporary
    from zeroplan.memory.stage import StageBase, buffer_bytes_by_phase, phase_totals
    from zeroplan.memory.states import cpu_offload_terms, nvme_bytes

    dense_dp, _ = shard_groups(model.mesh)
    states = share_states(share, model.mesh, recipe, stage, knobs)
    small = share.norm if hidden <= knobs.stage3_param_persistence_threshold else 0
    buffers = engine_buffers(num_params=share.total, largest_layer_params=share.largest_module,
                             small_param_numel=small, recipe=recipe, stage=stage, dp=dense_dp, knobs=knobs)
    buffers += deepspeed_temporary(recipe, stage, share.total, dense_dp, knobs)  # torch_adam only
    backward, step = phase_totals(states, buffers)
    where = f"pipeline rank {share.index} (layers {layer_ranges(share)})"
    return StageBase(
        stage=stage, knobs=knobs, states=states, buffers=buffers, buffer_bytes=buffer_bytes_by_phase(buffers),
        cpu_terms=cpu_offload_terms(states, share.total, recipe, dense_dp, knobs), gpus=par.gpus,
        gpus_per_node=par.gpus_per_node, backward_bytes=backward, step_bytes=step,
        nvme_bytes_per_node=nvme_bytes(share.total, recipe, stage, dense_dp, knobs) * par.gpus_per_node,
        notes=(f"busiest rank: {where}, {share.total:,} parameters ({share.experts:,} in experts)",))


def fsdp2_base(model: MeshModel, recipe: Recipe, stage: ZeroStage, par, knobs: DeepSpeedKnobs):
    """memory.engines' FSDP2 StageBase for the tensor-parallel rank's layout, sharded over the dp group."""
    from dataclasses import replace

    from zeroplan.memory.engines import engine_stage_base
    from zeroplan.memory.setup import Engine, Parallelism

    dense_dp, _ = shard_groups(model.mesh)
    base = engine_stage_base(Engine.fsdp2, None, model.layout, recipe, stage, Parallelism(gpus=dense_dp), knobs)
    return replace(base, gpus=par.gpus, gpus_per_node=par.gpus_per_node,
                   notes=base.notes + (f"FSDP2 shards each tensor-parallel rank's local shards over dp = {dense_dp} "
                                       "(fully_shard on the dp dimension of a (dp, tp) DeviceMesh)",))


def mesh_evaluate(model: MeshModel, stage_acts: tuple[int, ...], recipe: Recipe, stage: ZeroStage, par,
                  knobs: DeepSpeedKnobs, hidden: int, overheads=None, usable_bytes: int | None = None):
    """The StageEstimate of the busiest rank: over the pipeline stages, the largest peak of its model states,
    buffers and that stage's activations (`stage_acts`, one per pipeline stage)."""
    return max(rank_estimates(model, stage_acts, recipe, stage, par, knobs, hidden, overheads, usable_bytes),
               key=lambda e: e.total)


def rank_estimates(model: MeshModel, stage_acts: tuple[int, ...], recipe: Recipe, stage: ZeroStage, par,
                   knobs: DeepSpeedKnobs, hidden: int, overheads=None, usable_bytes: int | None = None) -> list:
    """The StageEstimate of one rank of every pipeline stage (mesh_evaluate reports the largest)."""
    from zeroplan.memory.stage import stage_peak

    bases = mesh_bases(model, recipe, stage, par, knobs, hidden)
    return [stage_peak(base, acts, overheads, usable_bytes) for base, acts in zip(bases, stage_acts, strict=True)]


def mesh_bases(model: MeshModel, recipe: Recipe, stage: ZeroStage, par, knobs: DeepSpeedKnobs, hidden: int) -> tuple:
    """The StageBase of one rank of every pipeline stage: FSDP2's over dp of the (dp, tp) mesh (one stage: with_mesh
    refuses pp > 1) when the model has an FSDP2 layout, else DeepSpeed's share of each pipeline stage."""
    if model.layout is not None:
        return (fsdp2_base(model, recipe, stage, par, knobs),)
    return tuple(share_base(model, share, recipe, stage, par, knobs, hidden) for share in model.shares)


def mesh_activations(model: MeshModel, arch, setup):
    """Each pipeline stage's activation breakdown on one of its ranks (memory.activations.mesh)."""
    from zeroplan.memory.activations.mesh import stage_activations

    return stage_activations(arch, setup, model.mesh)[0]


def rank_summaries(model: MeshModel, arch, setup) -> list[dict]:
    """Every pipeline rank, for the JSON view: its layers, parameters on one of its ranks, chunk-micro-batches in
    flight at its peak and activation bytes there."""
    from zeroplan.memory.activations.mesh import in_flight

    acts = mesh_activation_bytes(model, arch, setup)
    counts = in_flight(model.mesh, setup.grad_accum)
    return [{"rank": s.index, "layers": [list(c) for c in s.chunks], "parameters": s.total, "in_flight": n,
             "activation_bytes": a} for s, n, a in zip(model.shares, counts, acts, strict=True)]


def mesh_activation_bytes(model: MeshModel, arch, setup) -> tuple[int, ...]:
    """Each pipeline stage's activation bytes on one of its ranks (the breakdown's totals, without its notes)."""
    from zeroplan.memory.activations.mesh import stage_activations

    return tuple(a.total_bytes for a in stage_activations(arch, setup, model.mesh, notes=False)[0])
