"""Collective communication cost: which link a data-parallel group runs on, and what a ring costs on it.

Pure: imports neither rich, typer nor yaml and does no I/O. Sources: NVIDIA/nccl-tests@03a204a:doc/PERFORMANCE.md
(ring formulas, busbw), NVIDIA/nccl@b647562:src/graph/tuning.cc (latency); the planning busbw and alpha per
topology and the rail-NIC rule are derived in docs/hardware.md from published measurements. Model:
docs/throughput.md.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, PositiveInt

from zeroplan.errors import ZeroplanError
from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import HardwareSpec, Topology
from zeroplan.memory.setup import Parallelism

NIC_EFFICIENCY = (
    0.92  # achievable share of NIC line rate in a rail-optimized ring: 46 of 50 GB/s per 400G NIC (docs/hardware.md)
)
GB_PER_S = 1e9  # busbw, NIC and host-link rates are decimal GB/s (docs/hardware.md, "Conventions")
US = 1e-6  # alpha values are microseconds


class Collective(str, Enum):
    """What moves: NCCL collectives, or a copy over the GPU's host link (offload)."""

    all_reduce = "all-reduce"
    all_gather = "all-gather"
    reduce_scatter = "reduce-scatter"
    host_copy = "host-copy"


class Link(Frozen):
    """A communication group: how many ranks, the bus bandwidth a ring reaches, the latency of one collective."""

    ranks: PositiveInt
    busbw_gbps: float = Field(gt=0)
    alpha_us: float = Field(ge=0)
    label: str = Field(description="where the ring runs, e.g. 'nvlink', 'multinode (NIC-bound)'")


def default_topology(hw: HardwareSpec, par: Parallelism) -> Topology:
    """multinode if the GPUs span nodes, else the node's own fabric (xGMI counts as nvlink)."""
    if par.nodes > 1:
        return Topology.multinode
    return Topology.pcie if hw.intra_node_fabric == "pcie" else Topology.nvlink


def check_topology(hw: HardwareSpec, par: Parallelism, topology: Topology) -> None:
    """Reject a topology the hardware and GPU count cannot have, naming every value."""
    if par.gpus_per_node > hw.gpus_per_node:
        raise ZeroplanError(
            f"{par.gpus_per_node} GPUs per node ({par.gpus} GPUs on {par.nodes} nodes) exceed the "
            f"{hw.gpus_per_node} a {hw.name} node holds; spread them over more nodes"
        )
    if topology is Topology.multinode and par.nodes == 1:
        raise ZeroplanError(f"topology multinode needs more than one node (nodes = {par.nodes})")
    if topology is not Topology.multinode and par.nodes > 1:
        raise ZeroplanError(f"{par.nodes} nodes need topology multinode, not {topology.value}")
    if topology is Topology.nvlink and hw.intra_node_fabric == "pcie":
        raise ZeroplanError(f"topology nvlink needs an NVLink/xGMI node; {hw.name} GPUs talk over PCIe")


def node_link(hw: HardwareSpec, ranks: int, topology: Topology) -> Link:
    """The ring inside one node: the node's fabric, or PCIe when the topology says the GPUs talk over PCIe."""
    if topology is Topology.pcie or hw.intra_node_fabric == "pcie":
        return Link(ranks=ranks, busbw_gbps=hw.pcie_busbw_gbps, alpha_us=hw.pcie_alpha_us, label="pcie")
    return Link(ranks=ranks, busbw_gbps=hw.intra_node_busbw_gbps, alpha_us=hw.intra_node_alpha_us, label="nvlink")


def nic_busbw_gbps(hw: HardwareSpec, gpus_per_node: int) -> float:
    """Bus bandwidth of a ring that crosses nodes, as the NICs allow: 0.92 x g x per-GPU NIC rate.

    With one rail NIC per GPU every ring channel leaves the node through a different NIC, so the
    per-node crossing traffic spreads over all g NICs (docs/hardware.md; measured 192 GB/s on DGX-A100 8x200G,
    NVIDIA/nccl#1576).
    """
    return NIC_EFFICIENCY * gpus_per_node * hw.nic_gbps_per_gpu


def dp_link(hw: HardwareSpec, par: Parallelism, topology: Topology) -> Link:
    """The ring of the whole data-parallel group (planning defaults: docs/hardware.md).

    nvlink / pcie: the node's ring. multinode: min(intra-node busbw, 0.92 x g x NIC), inter-node alpha.
    """
    check_topology(hw, par, topology)
    inside = node_link(hw, par.dp, topology)
    if topology is not Topology.multinode:
        return inside
    nic = nic_busbw_gbps(hw, par.gpus_per_node)
    label = "multinode (NIC-bound)" if nic < inside.busbw_gbps else f"multinode ({inside.label}-bound)"
    return Link(ranks=par.dp, busbw_gbps=min(inside.busbw_gbps, nic), alpha_us=hw.inter_node_alpha_us, label=label)


def ring_factor(collective: Collective, ranks: int) -> float:
    """Bytes each rank sends per byte of the full buffer: 2(n-1)/n for all-reduce, (n-1)/n for AG and RS.

    nccl-tests doc/PERFORMANCE.md busbw factors (NVIDIA/nccl-tests@03a204a).
    """
    share = (ranks - 1) / ranks
    return 2 * share if collective is Collective.all_reduce else share


def ring_time_s(collective: Collective, num_bytes: float, link: Link, num_collectives: int = 1) -> float:
    """t = k alpha + f(n) S / B_bus, for S bytes of full buffer moved in k collectives on one ring.

    f(n) = 2(n-1)/n (all-reduce) or (n-1)/n (all-gather, reduce-scatter); S for AG/RS is the gathered array.
    A group of one rank issues no collective. Source: nccl-tests doc/PERFORMANCE.md (ring); alpha per preset,
    docs/hardware.md (NCCL's latency model and measured small-message floors).
    """
    if link.ranks == 1 or num_bytes == 0:
        return 0.0
    bandwidth_s = ring_factor(collective, link.ranks) * num_bytes / (link.busbw_gbps * GB_PER_S)
    return num_collectives * link.alpha_us * US + bandwidth_s


def host_copy_s(num_bytes: float, hw: HardwareSpec) -> float:
    """t = bytes / host-link bandwidth per direction (PCIe; measured rates in docs/hardware.md)."""
    return num_bytes / (hw.host_link_gbps * GB_PER_S)
