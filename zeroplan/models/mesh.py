"""A parallel mesh (tensor x pipeline x context x data, with expert parallelism for MoE) and the divisibility a
model needs to be laid out on it, checked once for every method (zeroplan's own and Megatron-LM's).

The checks are Megatron-LM's (megatron/training/arguments.py): the GPU count a multiple of tp x pp x cp, heads and
key-value heads multiples of tp, experts a multiple of ep; layers must split into the pipeline stages as the
stacks split them (split_problems: Megatron-LM's first/last stage counts, torchtitan's default over pp x chunks
stages when they do not divide, chunks under the interleaved and zbv schedules included; megatron_problems:
Megatron-LM's even split, each rank's layers a multiple of vpp). Each failure is one line with the numbers. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from zeroplan.errors import ZeroplanError
from zeroplan.models.architecture import Architecture


class Schedule(str, Enum):
    """The pipeline schedule, as torchtitan names them (`pipeline_parallel_schedule`) and torch.distributed.pipelining
    implements them (Schedule1F1B, ScheduleInterleaved1F1B, ScheduleGPipe, ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble); Megatron-LM runs 1F1B, interleaved when given virtual stages."""

    one_f_one_b = "1f1b"
    interleaved = "interleaved-1f1b"
    gpipe = "gpipe"
    interleaved_zero_bubble = "interleaved-zb"
    zbv = "zbv"


class CpComm(str, Enum):
    """How context parallelism moves the sequence, as Megatron-LM's --cp-comm-type names them: p2p, the ring
    exchange of K/V blocks (ring attention, Transformer Engine); a2a, DeepSpeed-Ulysses' all-to-alls that trade the
    sequence split for a head split around attention (DeepSpeed's `sequence_parallel_size`, UlyssesSPAttentionHF)."""

    p2p = "p2p"
    a2a = "a2a"


ZBV_CHUNKS = 2  # ZB-V puts exactly two model chunks on each rank, in a V (PyTorch's ScheduleZBVZeroBubble;
# sail-sg/zero-bubble-pipeline-parallelism README)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mesh:
    """Parallel degrees: tensor, pipeline (with virtual stages), context, expert (and expert-tensor)."""

    gpus: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # None: the tensor-parallel size, Megatron's default
    vpp: int | None = None  # virtual stages per pipeline rank; None or 1: no interleaving
    sequence_parallel: bool = False
    schedule: Schedule = None  # None: interleaved-1f1b with vpp > 1, else 1f1b (Megatron's reading of its vpp)
    # The token embedding split on the vocabulary (Megatron, torchtitan); DeepSpeed AutoTP replaces linears only and
    # keeps it whole. The logits and loss vocab-parallel (loss_parallel, vocab_parallel_cross_entropy); AutoTP's
    # head all-reduces whole logits unless tensor_parallel.vocab_parallel_lm_head.
    vocab_parallel_embedding: bool = True
    vocab_parallel_logits: bool = True
    # Layers of the first / last pipeline stage (Megatron-LM's --decoder-first/last-pipeline-num-layers); None:
    # the stack's default split (models.mesh.stage_layer_counts).
    pp_first_layers: int | None = None
    pp_last_layers: int | None = None
    # DeepSpeed's PipelineEngine (a ds_config's pipeline.stages): its PipelineModule's partition_method, which splits
    # the layers (models.partition), and its pipe buffers, which hold each in-flight micro-batch's stage input and
    # output (memory.activations.pipebuffers). None: another stack.
    pipe_partition: str | None = None
    # Decoder layers per pipeline stage as that partition gives them (scenario.meshed resolves it with the model).
    pp_layers: tuple[int, ...] | None = None
    cp_comm: CpComm = CpComm.p2p  # a2a: DeepSpeed-Ulysses (docs/parallelism.md)

    def __post_init__(self) -> None:
        if self.schedule is None:
            interleaved = self.vpp is not None and self.vpp > 1
            object.__setattr__(self, "schedule", Schedule.interleaved if interleaved else Schedule.one_f_one_b)

    @property
    def dp(self) -> int:
        """world_size // (tp x pp x cp), Megatron's data_parallel_size."""
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def is_data_parallel(self) -> bool:
        """Nothing but data parallelism: every GPU a data-parallel rank."""
        return (self.tp, self.pp, self.cp, self.ep, self.vpp or 1) == (1, 1, 1, 1, 1) and not self.sequence_parallel

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline rank: vpp (2 under zbv, which runs exactly two), 1 without interleaving."""
        return ZBV_CHUNKS if self.schedule is Schedule.zbv else (self.vpp or 1)

    def describe(self) -> str:
        parts = f"tp {self.tp} x pp {self.pp} x cp {self.cp} x dp {self.dp} = {self.gpus} GPUs"
        extra = [f"ep {self.ep}"] * (self.ep > 1) + [f"vpp {self.vpp}"] * bool(self.vpp and self.vpp > 1)
        extra += ["sequence parallel"] * (self.sequence_parallel and self.tp > 1)
        extra += [f"DeepSpeed PipelineEngine, partition_method '{self.pipe_partition}'"] * bool(self.pipe_partition)
        extra += ["cp all-to-all (DeepSpeed-Ulysses)"] * (self.cp > 1 and self.cp_comm is CpComm.a2a)
        extra += [f"schedule {self.schedule.value}"] * (self.pp > 1 and self.schedule is not Schedule.one_f_one_b)
        return parts + (f" ({', '.join(extra)})" if extra else "")


def mesh_problems(mesh: Mesh, arch: Architecture) -> list[str]:
    """Every way `arch` does not lay out on `mesh`, one line each with the numbers (empty: it does)."""
    found = []
    model_parallel = mesh.tp * mesh.pp * mesh.cp
    if mesh.gpus % model_parallel:
        found.append(f"--gpus {mesh.gpus} is not a multiple of tp x pp x cp = {mesh.tp} x {mesh.pp} x "
                     f"{mesh.cp} = {model_parallel}")
    if arch.num_attention_heads % mesh.tp:
        found.append(f"num_attention_heads ({arch.num_attention_heads}) is not a multiple of --tp {mesh.tp}")
    if arch.num_key_value_heads % mesh.tp:
        found.append(f"num_key_value_heads ({arch.num_key_value_heads}) is not a multiple of --tp {mesh.tp}")
    found += ulysses_problems(mesh, arch)
    found += schedule_problems(mesh)
    found += split_problems(mesh, arch.num_layers)
    if mesh.vpp and mesh.pp == 1:
        found.append(f"--vpp {mesh.vpp} interleaves pipeline stages and needs --pp 2 or more")
    if arch.is_moe and arch.num_experts % mesh.ep:
        found.append(f"num_experts ({arch.num_experts}) is not a multiple of --ep {mesh.ep}")
    if not arch.is_moe and mesh.ep > 1:
        found.append(f"--ep {mesh.ep} divides experts, and {arch.family} has none")
    expert_parallel = (mesh.etp or mesh.tp) * mesh.ep * mesh.pp
    if mesh.gpus % expert_parallel and expert_parallel != mesh.tp * mesh.pp:  # else the line above says it
        found.append(f"--gpus {mesh.gpus} is not a multiple of etp x ep x pp = {mesh.etp or mesh.tp} x "
                     f"{mesh.ep} x {mesh.pp} = {expert_parallel}")
    return found


def stage_layer_counts(num_layers: int, stages: int, first: int | None = None,
                       last: int | None = None) -> tuple[int, ...]:
    """Layers in each of `stages` pipeline stages (0 = first), as the stacks split them:

    - `first` / `last` given: Megatron-LM's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers
      (NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py, TransformerConfig.__post_init__): those
      stages hold that many, and the remaining layers must split evenly over the middle stages;
    - layers a multiple of `stages`: equal stages (Megatron-LM's default; what validation/measure_pp.py ran);
    - otherwise torchtitan's default (pytorch/torchtitan@02ef790:torchtitan/distributed/pipeline_parallel.py
      generate_llm_fqn_per_model_part, pipeline_parallel_first_stage_less_layers = last_stage_less_layers = 1):
      the embedding and the head weigh one layer each, E = L + 2 effective layers split E // S per stage, the first
      E % S stages one more, the first stage holding its share less 1 layer and the last its share less 1.
    One ZeroplanError line where no split exists."""
    if first is not None or last is not None:
        if stages < 2:
            raise ZeroplanError("--pp-first-layers / --pp-last-layers need --pp 2 or more")
        given = [n for n in (first, last) if n is not None]
        if any(n <= 0 for n in given):
            raise ZeroplanError(f"--pp-first-layers / --pp-last-layers must be above 0, got {', '.join(map(str, given))}")
        middle, rest = num_layers - sum(given), stages - len(given)
        if middle < 0 or (rest and middle % rest) or (not rest and middle):
            raise ZeroplanError(f"{num_layers} layers less {' + '.join(map(str, given))} (first/last stages) = {middle} "
                                f"do not split evenly over the {rest} middle pipeline stages (Megatron-LM's rule)")
        each = middle // rest if rest else 0
        return tuple(first if i == 0 and first is not None else last if i == stages - 1 and last is not None
                     else each for i in range(stages))
    if num_layers % stages == 0:
        return (num_layers // stages,) * stages
    effective = num_layers + 2  # torchtitan's input_weight = output_weight = 1
    per, extra = divmod(effective, stages)
    if per < 2:  # torchtitan refuses weights above per; per == 1 would leave the first or last stage empty
        raise ZeroplanError(f"{num_layers} layers do not split into {stages} pipeline stages: torchtitan's split of "
                            f"{effective} effective layers (embedding and head weigh one each) leaves a stage empty")
    counts = [per + (i < extra) for i in range(stages)]
    counts[0] -= 1
    counts[-1] -= 1
    return tuple(counts)


def layer_counts(mesh: Mesh, num_layers: int) -> tuple[int, ...]:
    """Layers in each of the mesh's pp x chunks stages: the stack's partition where it gave one (pp_layers), else
    stage_layer_counts."""
    if mesh.pp_layers is not None:
        return mesh.pp_layers
    return stage_layer_counts(num_layers, mesh.pp * mesh.chunks, mesh.pp_first_layers, mesh.pp_last_layers)


def split_problems(mesh: Mesh, num_layers: int) -> list[str]:
    """Why `num_layers` do not split into `mesh`'s pipeline stages, one line (empty: they do). A DeepSpeed
    PipelineEngine partition is checked as given (_partition_problems). Otherwise the pp x chunks stages (chunks: vpp
    under the interleaved schedules, 2 under zbv) split as stage_layer_counts says: equal where the layers divide,
    else torchtitan's default, which splits num_stages = pp x stages-per-rank the same way
    (pytorch/torchtitan@238fa99:torchtitan/distributed/pipeline_parallel.py pipeline_llm and
    generate_llm_fqn_per_model_part); Megatron-LM's first/last counts with one chunk per rank only (Megatron-LM
    with vpp splits each rank's layers evenly into its chunks: megatron_problems)."""
    if mesh.pipe_partition is not None:
        return _partition_problems(mesh, num_layers)
    stages = mesh.pp * mesh.chunks
    explicit = mesh.pp_first_layers is not None or mesh.pp_last_layers is not None
    what = (f"--pp {mesh.pp} x --vpp {mesh.vpp} = {stages}" if mesh.vpp and mesh.vpp > 1 else
            f"--pp {mesh.pp} x {ZBV_CHUNKS} model chunks (zbv) = {stages}")
    if mesh.chunks > 1 and explicit:
        return [f"--pp-first-layers / --pp-last-layers with {what} model chunks are not modelled (one chunk per "
                "rank only)"]
    if mesh.pp == 1 and not explicit:
        return []
    try:
        stage_layer_counts(num_layers, stages, mesh.pp_first_layers, mesh.pp_last_layers)
    except ZeroplanError as e:
        return [str(e).replace(f" {stages} pipeline stages", f" {what} pipeline stages") if mesh.chunks > 1 else str(e)]
    return []


def megatron_problems(mesh: Mesh, num_layers: int) -> list[str]:
    """Megatron-LM's own split rule, one line (empty: it splits): L / pp layers per rank (its default split), and
    with virtual stages each rank's layers a multiple of vpp (NVIDIA/Megatron-LM@d98e8a6:
    megatron/core/transformer/transformer_block.py, `num_layers_per_pipeline_rank % vp_size == 0`)."""
    if num_layers % mesh.pp:
        return [f"--method megatron: {num_layers} layers do not split evenly into --pp {mesh.pp} stages (Megatron-LM's "
                "default split; zeroplan's own method takes torchtitan's uneven one)"]
    per_rank, v = num_layers // mesh.pp, mesh.vpp or 1
    if v > 1 and per_rank % v:
        return [f"--method megatron: {num_layers} layers do not split evenly into --pp {mesh.pp} x --vpp {v} = "
                f"{mesh.pp * v} pipeline stages ({per_rank} layers per rank is not a multiple of --vpp {v}: "
                "Megatron-LM's rule; zeroplan's own method takes torchtitan's uneven split)"]
    return []


def _partition_problems(mesh: Mesh, num_layers: int) -> list[str]:
    """A DeepSpeed partition that leaves a stage without a decoder layer (zeroplan's stages hold at least one)."""
    counts = mesh.pp_layers
    if counts is None:  # not resolved against the model yet
        return []
    if len(counts) != mesh.pp or sum(counts) != num_layers:
        return [f"the pipeline split {', '.join(map(str, counts))} is not {num_layers} layers over {mesh.pp} stages"]
    if min(counts) < 1:
        return [f"DeepSpeed's partition_method '{mesh.pipe_partition}' splits the {num_layers} layers into "
                f"{', '.join(map(str, counts))} per stage over pipeline.stages {mesh.pp}: a stage without a decoder "
                "layer is not modelled"]
    return []


def ulysses_problems(mesh: Mesh, arch: Architecture) -> list[str]:
    """DeepSpeed-Ulysses' head split (UlyssesSPAttentionHF.__init__, deepspeedai/DeepSpeed@edaa722:deepspeed/runtime/
    sequence_parallel/ulysses_sp.py): heads a multiple of sp; kv heads a multiple of sp or a divisor of it (then
    each kv head is replicated sp / kv times, one per rank)."""
    if mesh.cp == 1 or mesh.cp_comm is not CpComm.a2a:
        return []
    sp, heads, kv = mesh.cp, arch.num_attention_heads, arch.num_key_value_heads
    found = []
    if mesh.tp > 1 or mesh.pp > 1 or mesh.ep > 1:
        found.append(f"--cp-comm a2a (DeepSpeed-Ulysses) is modelled over data parallelism only, not with "
                     f"tp {mesh.tp} x pp {mesh.pp} x ep {mesh.ep}")
    if heads % sp:
        found.append(f"num_attention_heads ({heads}) is not a multiple of --cp {sp} (DeepSpeed-Ulysses splits the "
                     "heads over the sequence-parallel ranks)")
    if kv % sp and sp % kv:
        found.append(f"num_key_value_heads ({kv}) neither divides nor is a multiple of --cp {sp} (DeepSpeed-Ulysses: "
                     "'KV attention head count ... is not divisible by SP size ... or vice versa')")
    return found


def schedule_problems(mesh: Mesh) -> list[str]:
    """Schedule and virtual-stage combinations no stack runs, one line each (empty: they run)."""
    v = mesh.vpp or 1
    if mesh.schedule is Schedule.zbv and v not in (1, ZBV_CHUNKS):
        return [f"--pp-schedule zbv runs exactly {ZBV_CHUNKS} model chunks per rank (PyTorch's ScheduleZBVZeroBubble); "
                f"--vpp {v} given"]
    if mesh.schedule in (Schedule.gpipe, Schedule.one_f_one_b) and v > 1:
        return [f"--vpp {v} interleaves model chunks: give --pp-schedule interleaved-1f1b, interleaved-zb or zbv, "
                f"not {mesh.schedule.value}"]
    return []


def check_mesh(mesh: Mesh, arch: Architecture) -> None:
    """Raise the first of mesh_problems as a ZeroplanError."""
    if found := mesh_problems(mesh, arch):
        raise ZeroplanError(found[0])
