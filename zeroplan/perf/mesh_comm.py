"""Per micro-batch on one rank of a pipeline stage: tensor-parallel collectives, context parallelism's ring
exchange, expert parallelism's all-to-all and the pipeline's point-to-point sends, in seconds and wire bytes.

Sources (docs/throughput.md, "Mesh", has each formula):
- TP: Shoeybi et al. 2019 (Megatron-LM, arXiv:1909.08053) section 3: two all-reduces of b x s x h per layer in
  the forward (after attention and after the MLP) and two in the backward; Korthikanti et al. 2022
  (arXiv:2205.05198) section 4.2.2: sequence parallelism turns each into an all-gather and a reduce-scatter of
  the same volume; full recomputation runs the forward's two again. Exposed: Megatron overlaps them only with
  --tp-comm-overlap (Transformer Engine userbuffers), off by default.
- CP: ring attention (Liu et al. 2023, arXiv:2310.01889): cp - 1 steps per layer, each passing one K/V block to
  the next rank while the attention core of the current block runs; the backward passes K/V and dK/dV
  (Megatron-LM's context parallelism through Transformer Engine,
  NVIDIA/Megatron-LM@1df56dc:docs/source/api-guide/context_parallel.rst).
- CP by all-to-all (DeepSpeed-Ulysses, --cp-comm a2a): Jacobs et al. 2023 (arXiv:2309.14509) section 3: per layer
  the forward all-to-alls q, k, v and the attention output (4 N h / P per GPU for MHA), the backward the same four
  in reverse (_DimZeroAllToAll's backward, deepspeedai/DeepSpeed@edaa722:deepspeed/sequence/layer.py); k and v at
  max(kv heads, cp) heads (UlyssesSPAttentionHF replicates kv heads below cp). Nothing overlaps them with compute
  in UlyssesSPAttentionHF (each is awaited before the core runs), so they are exposed.
- EP: Megatron-core's MoE token dispatcher (NVIDIA/Megatron-LM@bed33f8:megatron/core/transformer/moe/token_dispatcher.py,
  all-to-all):
  dispatch and combine, each all-to-all of the routed tokens (T k h), forward and backward.
- PP: Narayanan et al. 2021 (arXiv:2104.04473) section 4.1: one b x s x h tensor per stage boundary forward, its
  gradient backward; with sequence parallelism the sent tensor is the 1/t sequence shard.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.memory.activations.checkpointing import checkpointed_layers
from zeroplan.memory.setup import Attention, Checkpointing, TrainingSetup
from zeroplan.models.mesh import CpComm
from zeroplan.perf.collectives import (
    GB_PER_S,
    NIC_EFFICIENCY,
    US,
    Collective,
    Link,
    ring_factor,
)
from zeroplan.perf.flops import ATTN_FWD_FLOPS, CAUSAL_FRACTION
from zeroplan.perf.pipeline import boundaries_per_micro_batch
from zeroplan.perf.placement import ranks_per_node

TP_COLLECTIVES_PER_PASS = 2  # per layer and pass: after attention's row linear and after the MLP's (arXiv:1909.08053)
CP_BACKWARD_PER_FORWARD = 2  # backward ring passes K/V and dK/dV: twice the forward's bytes (TE context parallel)
A2A_PER_PASS = 2  # per MoE layer and pass: dispatch and combine (megatron/core/transformer/moe/token_dispatcher.py)
KV_TENSORS = 2  # K and V
A2A_PASSES = 2  # Ulysses: the forward's four all-to-alls, and the backward's four (layer.py _DimZeroAllToAll)


@dataclass(frozen=True, slots=True)
class StageCost:
    """One micro-batch on one rank of a stage: seconds (the CP term as exposed) and bytes that rank sends."""

    forward_s: float
    backward_s: float  # recompute included
    tp_s: float
    tp_bytes: float
    cp_exposed_s: float
    cp_comm_s: float  # the ring's transfers end to end, before the attention compute hides them
    cp_bytes: float
    ep_s: float
    ep_bytes: float
    p2p_s: float
    p2p_bytes: float

    @property
    def micro_batch_s(self) -> float:
        return self.forward_s + self.backward_s + self.tp_s + self.cp_exposed_s + self.ep_s + self.p2p_s


def wrapped_share(num_layers: int, setup: TrainingSetup) -> float:
    """Share of the layers full checkpointing recomputes (every:N wraps the N-th, 2N-th, ...; 0 without it)."""
    if setup.checkpointing is not Checkpointing.full:
        return 0.0
    if setup.checkpoint_every == 1:
        return 1.0
    return sum(checkpointed_layers(num_layers, setup.checkpoint_every)) / num_layers


def tp_cost(layout, w, setup: TrainingSetup, share: float) -> tuple[float, float]:
    """(seconds, bytes) of TP per micro-batch: l x 2 x (2 + r) collectives of S = b (s/cp) h e on the tp ring,
    each an all-reduce, alpha + 2(t-1)/t S / B, or with sequence parallelism an all-gather plus a reduce-scatter,
    2 alpha + 2 (t-1)/t S / B: the same bytes, twice the latency. r = recomputed share of the layers."""
    link = layout.groups["tp"].link
    if link.ranks == 1:
        return 0.0, 0.0
    size = setup.tokens_per_micro_step / layout.mesh.cp * layout.arch.hidden_size * setup.precision.compute_bytes
    count = w.layers * TP_COLLECTIVES_PER_PASS * (2 + share)
    wire = count * ring_factor(Collective.all_reduce, link.ranks) * size
    latencies = count * (2 if layout.mesh.sequence_parallel else 1)
    return latencies * link.alpha_us * US + wire / (link.busbw_gbps * GB_PER_S), wire


def _send_s(num_bytes: float, link: Link, hw) -> float:
    """One rank's send to its ring or pipeline neighbour: alpha + bytes / B, B at most one NIC (x 0.92) when the
    group spans nodes (the send that crosses a node boundary leaves through one GPU's NIC)."""
    rate = link.busbw_gbps
    if link.label.startswith("multinode"):
        rate = min(rate, NIC_EFFICIENCY * hw.nic_gbps_per_gpu)
    return link.alpha_us * US + num_bytes / (rate * GB_PER_S)


def cp_cost(layout, w, setup: TrainingSetup, per_s: float, share: float) -> tuple[float, float, float]:
    """(exposed s, comm s, bytes) of the ring exchange per micro-batch: per layer and pass, cp - 1 sends of the
    K/V block 2 b (s/cp) (kv/t) d_h e, each hidden under one block of attention compute (forward A / cp; the
    backward twice both); recomputed with full or selective checkpointing."""
    mesh, arch = layout.mesh, layout.arch
    link = layout.groups["cp"].link
    if mesh.cp == 1:
        return 0.0, 0.0, 0.0
    if mesh.cp_comm is CpComm.a2a:
        seconds, wire = ulysses_cost(layout, w, setup, share)
        return seconds, seconds, wire
    tokens = setup.tokens_per_micro_step / mesh.cp
    block = KV_TENSORS * tokens * max(1, arch.num_key_value_heads // mesh.tp) * arch.head_dim \
        * setup.precision.compute_bytes
    causal = CAUSAL_FRACTION if setup.attention is Attention.flash else 1.0
    attn_s = tokens * ATTN_FWD_FLOPS * (arch.num_attention_heads // mesh.tp) * arch.head_dim * setup.seq_len \
        * causal / per_s / mesh.cp
    send_s = _send_s(block, link, layout.hw)
    redo = share if setup.checkpointing is Checkpointing.full else float(setup.checkpointing is Checkpointing.selective)
    fwd_passes = 1 + redo
    steps = (mesh.cp - 1) * w.layers
    exposed = steps * (fwd_passes * max(0.0, send_s - attn_s)
                       + CP_BACKWARD_PER_FORWARD * max(0.0, send_s - attn_s))
    comm = steps * (fwd_passes + CP_BACKWARD_PER_FORWARD) * send_s
    return exposed, comm, steps * (fwd_passes + CP_BACKWARD_PER_FORWARD) * block


def ulysses_cost(layout, w, setup: TrainingSetup, share: float) -> tuple[float, float]:
    """(seconds, bytes) of Ulysses' all-to-alls per micro-batch: per layer and pass (forward, backward; the forward
    again for the recomputed share r), q and the output of b (s/cp) a d e each and k, v of b (s/cp) max(g, cp) d e
    each, each one an all_to_all over the cp group."""
    mesh, arch = layout.mesh, layout.arch
    tokens = setup.tokens_per_micro_step / mesh.cp
    e, d = setup.precision.compute_bytes, arch.head_dim
    sizes = [tokens * arch.num_attention_heads * d * e] * 2 + [tokens * max(arch.num_key_value_heads, mesh.cp) * d * e] * 2
    seconds, wire = zip(*(all_to_all(layout, "cp", mesh.cp, x) for x in sizes), strict=True)
    passes = w.layers * (A2A_PASSES + share)
    return passes * sum(seconds), passes * sum(wire)


def ep_cost(layout, w, setup: TrainingSetup, share: float) -> tuple[float, float]:
    """(seconds, bytes) of the MoE all-to-alls per micro-batch: per MoE layer 2 x (2 + r) of T k h e bytes, T the
    rank's tokens (/ t with sequence parallelism); the (ep - k)/ep leaving the node at 0.92 x the GPU's NIC, the
    (k - 1)/ep staying on the fabric, k the group's ranks per node."""
    mesh, arch = layout.mesh, layout.arch
    if mesh.ep == 1 or not w.moe_layers:
        return 0.0, 0.0
    tokens = setup.tokens_per_micro_step / mesh.cp / (mesh.tp if mesh.sequence_parallel else 1)
    size = tokens * arch.num_experts_per_tok * arch.hidden_size * setup.precision.compute_bytes
    one, wire = all_to_all(layout, "ep", mesh.ep, size)
    count = w.moe_layers * A2A_PER_PASS * (2 + share)
    return count * one, count * wire


def all_to_all(layout, group_name: str, degree: int, size: float) -> tuple[float, float]:
    """(seconds, bytes sent) of one all_to_all of `size` bytes per rank over the `degree` ranks of a group: the
    (degree - k)/degree leaving the node at 0.92 x the GPU's NIC, the (k - 1)/degree staying on the fabric, k the
    group's ranks per node, the slower of the two plus one latency (the node's, or the network's when any leaves)."""
    local = ranks_per_node(degree, layout.groups[group_name].stride, layout.gpus_per_node)
    fabric = layout.hw.intra_node_busbw_gbps * GB_PER_S
    nic = NIC_EFFICIENCY * layout.hw.nic_gbps_per_gpu * GB_PER_S
    off, inside = (degree - local) / degree * size, (local - 1) / degree * size
    alpha = (layout.hw.inter_node_alpha_us if off else layout.hw.intra_node_alpha_us) * US
    return alpha + max(off / nic, inside / fabric), off + inside


def p2p_cost(layout, setup: TrainingSetup) -> tuple[float, float]:
    """(seconds, bytes) of pipeline sends per micro-batch on a middle rank: one activation forward and one
    gradient backward per model chunk, each b (s/cp) h e (/ t with sequence parallelism)."""
    mesh = layout.mesh
    sends = 2 * boundaries_per_micro_batch(mesh)
    if not sends:
        return 0.0, 0.0
    size = setup.tokens_per_micro_step / mesh.cp * layout.arch.hidden_size * setup.precision.compute_bytes
    size /= mesh.tp if mesh.sequence_parallel else 1
    return sends * _send_s(size, layout.groups["pp"].link, layout.hw), sends * size


def stage_cost(layout, w, setup: TrainingSetup, forward_s: float, backward_s: float, per_s: float) -> StageCost:
    """Every per-micro-batch term of one rank of stage `w` (the functions above)."""
    share = wrapped_share(w.layers, setup)
    tp_s, tp_bytes = tp_cost(layout, w, setup, share)
    cp_exposed, cp_comm, cp_bytes = cp_cost(layout, w, setup, per_s, share)
    ep_s, ep_bytes = ep_cost(layout, w, setup, share)
    p2p_s, p2p_bytes = p2p_cost(layout, setup)
    return StageCost(forward_s=forward_s, backward_s=backward_s, tp_s=tp_s, tp_bytes=tp_bytes,
                     cp_exposed_s=cp_exposed, cp_comm_s=cp_comm, cp_bytes=cp_bytes, ep_s=ep_s, ep_bytes=ep_bytes,
                     p2p_s=p2p_s, p2p_bytes=p2p_bytes)
