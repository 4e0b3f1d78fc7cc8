"""Activations of one rank of a tensor x pipeline x context mesh: which saved tensors tensor parallelism divides
by t, what sequence parallelism shards, context parallelism's split of the sequence, and the micro-batches each
pipeline stage keeps in flight (docs/parallelism.md).

Tensor parallelism (Korthikanti et al. 2022, arXiv:2205.05198, section 4.2.1): the tensors inside the attention
core and the MLP (q, k, v, the core's output, the activation and gate product, the down projection's input) hold
a/t heads or f/t columns per rank; the norms, the projections' inputs and the dropout masks of the residual
stream are replicated. Sequence parallelism (section 4.2.2) shards the norm region on the sequence: the norms
and dropout masks keep 1/t. The projections' inputs differ by stack:
- PyTorch (torch.distributed.tensor.parallel SequenceParallel + ColwiseParallel(input_layouts=Shard(1)),
  torchtitan): the all-gathered input is what the column linear saves, whole (zeroplan's default);
- Megatron-LM (megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication): the
  linear saves its 1/t shard and all-gathers it again in backward.
The head is vocab-parallel (torchtitan's loss_parallel, Megatron's vocab_parallel_cross_entropy): logits, their
fp32 copy and the log-softmax hold V/t per rank; the labels are whole. Context parallelism gives each rank s/cp
tokens of every sequence (ring attention: flash kernels only). The pipeline schedule sets how many chunk-micro-
batches each rank keeps in flight (memory.activations.pipeline: 1F1B's rank i holds min(pp - i, m)).
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import ActivationEstimate, ActivationTerm, activation_bytes, layer_input_bytes
from zeroplan.memory.activations.loss import INDEX_BYTES
from zeroplan.memory.activations.terms import final_norm_terms
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.pipeengine import pipe_buffer_bytes
from zeroplan.memory.pipelining import StageBuffers, input_saved, stage_buffers
from zeroplan.memory.setup import Attention, Checkpointing, Loss, TrainingSetup
from zeroplan.models.architecture import Architecture
from zeroplan.memory.activations.pipeline import (chunk_counts, chunks_in_flight, head_in_flight, head_rank,
                                                  rank_layers, rank_stages)
from zeroplan.memory.activations.ulysses import A2A_OUTPUT, KV_REPLICAS, ulysses_base
from zeroplan.models.mesh import CpComm, Mesh, Schedule

PYTORCH, MEGATRON = "pytorch", "megatron"  # sequence-parallel stacks

SCHEDULE_RULE = {  # the closed forms of memory.activations.pipeline, as the assumptions print them
    Schedule.gpipe: "GPipe: all m",
    Schedule.one_f_one_b: "1F1B: rank r min(pp - r, m)",
    Schedule.interleaved: "interleaved 1F1B: min((vpp - 1) g + 2 (pp - 1 - r) + 1, m vpp), g micro-batches a round",
    Schedule.interleaved_zero_bubble: "interleaved zero bubble, held until the weight backward: "
                                      "min((vpp - 1) g + pp, m vpp); " + "{zb}",
    Schedule.zbv: "ZBV, held until the weight backward: min(2 pp - r - 1, m) + min(r + 1, m); {zb}",
}
# validation/pp_measured.json (torch 2.13 on gloo, the harness's pack hook holding a detached alias): the zero-bubble
# schedules hold what their action lists say on every rank; zeroplan within 1.2% of the saved tensors but on
# interleaved-zb's last rank, whose logits it counts min(pp, m) times: up to 11.6% over there.
ZERO_BUBBLE_CAVEAT = ("measured on torch 2.13 within 1.2% of every rank but interleaved-zb's last, where zeroplan "
                      "counts the head's logits min(pp, m) times and is up to 12% over (docs/parallelism.md)")

# Saved tensors of a layer inside the tensor-parallel region: a/t heads or f/t columns per rank.
SPLIT = frozenset({
    "q, k, v", "q, k, v (core inputs)", "q, k, v (a heads)", "output", "log-sum-exp",
    "output projection input (transposed copy)", "output projection input", "score soft-capping tanh",
    "softmax output", "probability dropout mask + output", "probabilities cast to e", "activation",
    "activation output and up projection (gate product)", "down projection input", A2A_OUTPUT, KV_REPLICAS,
})
# The norm region of the residual stream: replicated without sequence parallelism, 1/t with it.
NORM_REGION = frozenset({
    "attention norm", "MLP norm", "post-attention norm", "post-MLP norm", "attention output dropout mask",
    "MLP output dropout mask", "final norm", "final dropout mask",
})
# A column linear's input: replicated; under sequence parallelism the gathered tensor (PyTorch) or the shard (Megatron).
GATHERED = frozenset({"q/k/v projection input", "MLP input", "cross-attention q projection input", "LM head input"})


def term_divisor(name: str, mesh: Mesh, stack: str = PYTORCH) -> int | None:
    """What tensor (and sequence) parallelism divides the saved tensor `name` by; None: not classified (kept whole)."""
    sp = mesh.sequence_parallel and mesh.tp > 1
    if name in SPLIT:
        return mesh.tp
    if name in NORM_REGION:
        return mesh.tp if sp else 1
    if name in GATHERED:
        return mesh.tp if sp and stack == MEGATRON else 1
    return None


def _check(arch: Architecture, setup: TrainingSetup, mesh: Mesh) -> None:
    if setup.seq_len % mesh.cp:
        raise ZeroplanError(f"--seq-len {setup.seq_len} is not a multiple of --cp {mesh.cp}")
    if mesh.cp > 1 and traits_of(arch).eager_only:
        raise ZeroplanError(f"--cp {mesh.cp}: context parallelism runs flash kernels; transformers has no flash path "
                            f"for {arch.family}")
    if mesh.cp > 1 and setup.attention is not Attention.flash:
        kind = "DeepSpeed-Ulysses" if mesh.cp_comm is CpComm.a2a else "ring attention"
        raise ZeroplanError(f"--cp {mesh.cp}: context parallelism ({kind}) runs flash kernels; "
                            "give --attention flash")
    if setup.checkpointing in (Checkpointing.selective_op,) or setup.checkpoint_every > 1:
        raise ZeroplanError(f"--checkpointing {setup.checkpointing_label} on a tp/pp/cp mesh is not modelled yet; "
                            "give none, selective or full")
    if setup.loss is not Loss.hf and mesh.tp > 1 and mesh.vocab_parallel_logits:
        raise ZeroplanError(f"--loss {setup.loss.value} with --tp {mesh.tp}: the vocab-parallel loss is modelled "
                            "for --loss hf only")
    if arch.num_encoder_layers:
        raise ZeroplanError(f"{arch.family} is an encoder-decoder: zeroplan lays out decoder-only models on a mesh")


def rank_activations(arch: Architecture, setup: TrainingSetup, mesh: Mesh,
                     stack: str = PYTORCH) -> tuple[ActivationEstimate, tuple[str, ...]]:
    """One micro-batch's activations on one tensor/context-parallel rank, for the whole layer stack (no pipeline):
    the single-GPU terms at s/cp tokens, each divided as term_divisor says. Also the names left whole."""
    _check(arch, setup, mesh)
    base = activation_bytes(arch, replace(setup, seq_len=setup.seq_len // mesh.cp))
    if mesh.cp > 1 and mesh.cp_comm is CpComm.a2a:
        base = ulysses_base(arch, setup, mesh, base)
    unknown: set[str] = set()

    def split(name: str, value: int) -> int:
        divisor = term_divisor(name, mesh, stack)
        if divisor is None:
            unknown.add(name)
            divisor = 1
        return -(-value // divisor)

    terms = tuple(ActivationTerm(name=t.name, bytes=split(t.name, t.bytes)) for t in base.layer_terms)
    t = mesh.tp
    if setup.checkpointing is Checkpointing.full:
        residual = t if mesh.sequence_parallel and t > 1 else 1
        each = tuple(-(-b // residual) for b in base.layer_bytes)
        recompute = -(-base.recompute_bytes // t)  # one layer's recompute: its tensor-parallel part dominates
    else:
        # none / selective: every layer's saved terms, split term by term (the layers differ only by their MLP kind)
        ratio_num = sum(x.bytes for x in terms)
        ratio_den = sum(x.bytes for x in base.layer_terms) or 1
        each = tuple(b * ratio_num // ratio_den for b in base.layer_bytes)
        recompute = -(-base.recompute_bytes // t)  # the selective core: a/t heads
    labels = INDEX_BYTES * setup.micro_batch * (setup.seq_len // mesh.cp)
    v = t if mesh.vocab_parallel_logits else 1  # AutoTP without vocab_parallel_lm_head: whole logits on every rank
    logits = -(-base.logits_bytes // v)
    loss = -(-(base.loss_bytes - labels) // v) + labels
    transient = -(-base.loss_transient_bytes // v)
    softcap = -(-base.logit_softcap_bytes // v)
    final = base.final_norm_bytes
    if t > 1:  # --loss hf (checked): the head saves its input
        b, s_local, e = setup.micro_batch, setup.seq_len // mesh.cp, setup.precision.compute_bytes
        final = sum(split(name, value) for name, value in final_norm_terms(arch, traits_of(arch), b, s_local, e))
    layers = sum(each) + base.held_bytes
    total = layers + recompute + base.embedding_bytes + final + logits + softcap + loss
    est = replace(base, layers_bytes=layers, recompute_bytes=recompute, final_norm_bytes=final, logits_bytes=logits,
                  logit_softcap_bytes=softcap, loss_bytes=loss, loss_transient_bytes=transient, total_bytes=total,
                  per_layer_bytes=max(each, default=0), layer_terms=terms, layer_bytes=each)
    return est, tuple(sorted(unknown))


def in_flight(mesh: Mesh, micro_batches: int) -> tuple[int, ...]:
    """Per pipeline rank, the most chunk-micro-batches it keeps alive (memory.activations.pipeline)."""
    return tuple(chunks_in_flight(mesh, micro_batches, r) for r in range(mesh.pp))


@lru_cache(maxsize=1024)
def _rank_once(arch: Architecture, setup: TrainingSetup, tp: int, cp: int, sequence_parallel: bool,
               vocab_parallel_logits: bool, stack: str,
               cp_comm: CpComm = CpComm.p2p) -> tuple[ActivationEstimate, tuple[str, ...]]:
    """rank_activations, once per what it reads (tp, cp, sequence parallelism, the logits' split; not the pipeline
    nor the accumulation): the parallelism search asks it for every pp and schedule of the same rank."""
    mesh = Mesh(gpus=tp * cp, tp=tp, cp=cp, sequence_parallel=sequence_parallel,
                vocab_parallel_logits=vocab_parallel_logits, cp_comm=cp_comm)
    return rank_activations(arch, setup, mesh, stack)


def stage_activations(arch: Architecture, setup: TrainingSetup, mesh: Mesh, stack: str = PYTORCH, *,
                      notes: bool = True) -> tuple[tuple[ActivationEstimate, ...], tuple[str, ...]]:
    """Each pipeline rank's activations at its peak: its largest model chunk's layers x the chunk-micro-batches it
    keeps in flight under the schedule (exact when the chunks are alike), the embedding on the first rank (at
    most m micro-batches), the final norm, logits and loss on the head's rank (pipeline.head_in_flight of them).
    notes=False leaves the per-rank assumption lines out (the figures are the same): for callers that read bytes."""
    one, unknown = _rank_once(arch, replace(setup, grad_accum=1), mesh.tp, mesh.cp, mesh.sequence_parallel,
                              mesh.vocab_parallel_logits, stack, mesh.cp_comm)
    m = setup.grad_accum
    head, heads = head_rank(mesh), head_in_flight(mesh, m)
    if mesh.pp > 1 and stack == PYTORCH and not mesh.pipe_partition:  # once per call, not per rank
        boundary, saves = _pytorch_boundary(arch, setup, mesh), input_saved(
            traits_of(arch).norm, setup.precision.compute_bytes, setup.checkpointing is Checkpointing.full)
    stages = []
    for i, (n, chunks) in enumerate(zip(in_flight(mesh, m), rank_layers(len(one.layer_bytes), mesh), strict=True)):
        each = tuple(b for first, last in chunks for b in one.layer_bytes[first:last + 1])
        chunk = max(sum(one.layer_bytes[first:last + 1]) for first, last in chunks)
        h = heads if i == head else 0
        layers = n * (chunk + one.held_bytes)
        embedding = min(n, m) * one.embedding_bytes if i == 0 else 0
        final, logits, softcap, loss = one.final_norm_bytes, one.logits_bytes, one.logit_softcap_bytes, one.loss_bytes
        if mesh.pipe_partition:
            pipe = pipe_buffer_bytes(i, mesh.pp, n, _boundary_bytes(arch, setup, mesh))
            pipe_notes = _pipe_notes(mesh, pipe) if notes else ()
        elif mesh.pp > 1 and stack == PYTORCH:
            kept = _pytorch_buffers(setup, mesh, i, boundary, saves)
            pipe, pipe_notes = kept.total, _pytorch_notes(mesh, kept) if notes else ()
        else:
            pipe, pipe_notes = 0, ()
        total = layers + one.recompute_bytes + embedding + h * (final + logits + softcap + loss) + pipe
        said = one.assumptions + _notes(mesh, stack, n, i, unknown) + pipe_notes if notes else one.assumptions
        stages.append(replace(one, layers_bytes=layers, embedding_bytes=embedding, final_norm_bytes=h * final,
                              pipe_buffer_bytes=pipe,
                              logits_bytes=h * logits, logit_softcap_bytes=h * softcap, loss_bytes=h * loss,
                              loss_transient_bytes=one.loss_transient_bytes if h else 0, total_bytes=total,
                              layer_bytes=each, held_bytes=n * one.held_bytes, assumptions=said))
    return tuple(stages), unknown


def _boundary_bytes(arch: Architecture, setup: TrainingSetup, mesh: Mesh) -> int:
    """One micro-batch's tensor at a stage boundary: b x s/cp x h in the compute dtype (DeepSeek-V4: its N
    hyper-connection streams, a layer's input)."""
    return layer_input_bytes(arch, setup.micro_batch, setup.seq_len // mesh.cp, setup.precision.compute_bytes)


def _pytorch_boundary(arch: Architecture, setup: TrainingSetup, mesh: Mesh) -> int:
    """The tensor a PyTorch PipelineStage sends: the sequence-parallel shard under SP (torchtitan's plan), else
    b x s/cp x h."""
    boundary = _boundary_bytes(arch, setup, mesh)
    return -(-boundary // mesh.tp) if mesh.sequence_parallel and mesh.tp > 1 else boundary


def _pytorch_buffers(setup: TrainingSetup, mesh: Mesh, rank: int, boundary: int, saves: bool) -> StageBuffers:
    """What rank `rank`'s PipelineStages keep beside their saved tensors (memory/pipelining.py), `boundary` bytes
    per tensor; `saves`: the first layer saves the stage input itself (pipelining.input_saved)."""
    stages = rank_stages(mesh, rank)
    handoff = mesh.pp - 1 if mesh.schedule is Schedule.zbv else None
    return stage_buffers(stages, chunk_counts(mesh, setup.grad_accum, rank), mesh.pp * mesh.chunks,
                         setup.grad_accum, boundary, saves_input=saves,
                         local_handoff=handoff)


def _pytorch_notes(mesh: Mesh, kept: StageBuffers) -> tuple[str, ...]:
    return (f"PyTorch pipelining (torch.distributed.pipelining) keeps beside the saved tensors {kept.total:,} B on this "
            f"rank: its stage outputs until their backward (PipelineStage.fwd_cache, {kept.outputs:,} B) and one "
            f"activation / gradient receive buffer per micro-batch for the run ({kept.receive:,} B), less the "
            f"in-flight inputs the first layer saves ({kept.overlap:,} B); counted alive the whole step "
            "(memory/pipelining.py)",)


def _pipe_notes(mesh: Mesh, pipe: int) -> tuple[str, ...]:
    if not mesh.pipe_partition:
        return ()
    return (f"DeepSpeed PipelineEngine's pipe buffers: {pipe:,} B ({pipe / 2**30:.2f} GiB) on this rank, each in-flight micro-batch's received "
            "input (after the first stage) and output (before the last) plus one receive and one gradient buffer, "
            "b x s x h each (memory/pipeengine.py)",)


def _notes(mesh: Mesh, stack: str, m: int, i: int, unknown: tuple[str, ...]) -> tuple[str, ...]:
    notes = []
    if mesh.tp > 1:
        sp = mesh.sequence_parallel
        notes.append(f"activations under tp {mesh.tp}: attention-core and MLP-inner tensors / {mesh.tp}, "
                     + (f"norm region / {mesh.tp} (sequence parallel), the column linears' gathered inputs "
                        + ("whole (PyTorch/torchtitan SequenceParallel, zeroplan's default)" if stack == PYTORCH
                           else f"/ {mesh.tp} (Megatron-LM)") if sp else "norms, projection inputs and dropout "
                        "masks whole (no sequence parallelism)")
                     + (f"; vocab-parallel logits and loss / {mesh.tp}" if mesh.vocab_parallel_logits else
                        "; logits and loss whole on every rank (DeepSpeed AutoTP's head all-reduces them)"))
    if mesh.cp > 1:
        notes.append(f"context parallel {mesh.cp}: each rank holds seq-len / {mesh.cp} tokens of every sequence"
                     + (f"; DeepSpeed-Ulysses all-to-alls: attention on heads / {mesh.cp} over the whole sequence, "
                        "the all-to-all output o_proj reads kept beside the core's, kv heads below cp replicated to "
                        "one per rank, rotary tables per sample (docs/parallelism.md)" if mesh.cp_comm is CpComm.a2a
                        else " (ring attention)"))
    if mesh.pp > 1:
        notes.append(f"pipeline schedule {mesh.schedule.value}: rank {i} keeps {m} "
                     + (f"chunk-micro-batches of its {mesh.chunks} model chunks" if mesh.chunks > 1 else "micro-batch(es)")
                     + f" in flight at its peak ({SCHEDULE_RULE[mesh.schedule].format(zb=ZERO_BUBBLE_CAVEAT)}; "
                     "docs/parallelism.md)")
    if unknown:
        notes.append("activation terms not classified for tensor parallelism, counted whole: " + ", ".join(unknown))
    return tuple(notes)
