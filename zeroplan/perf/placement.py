"""Where each group of a tp x cp x ep x dp x pp mesh sits, and the link its collectives run on.

Ranks are laid out in Megatron-LM's order, tp fastest, then cp, ep, dp, pp (NVIDIA/Megatron-LM@934c826:megatron/core/parallel_state.py,
`initialize_model_parallel(order="tp-cp-ep-dp-pp")`): a group whose ranks are `stride` apart, n of them, stays in
one node when stride x n <= GPUs per node, and otherwise puts max(1, GPUs per node / stride) of its ranks on each
node. In a node a group runs on the node's fabric; across nodes its ring crosses the NICs with the rail rule of
perf/collectives.py (0.92 x NIC per GPU x the group's ranks per node), at the inter-node latency.
Pure: no I/O. Model: docs/throughput.md, "Mesh".
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.hardware.spec import HardwareSpec, Topology
from zeroplan.models.mesh import Mesh
from zeroplan.perf.collectives import NIC_EFFICIENCY, Link, node_link


@dataclass(frozen=True, slots=True)
class Group:
    """One kind of communication group of the mesh: its size, the rank stride inside it, where it runs."""

    name: str
    ranks: int
    stride: int
    link: Link

    @property
    def spans_nodes(self) -> bool:
        return self.link.label.startswith("multinode")


def ranks_per_node(ranks: int, stride: int, gpus_per_node: int) -> int:
    """How many of a group's ranks share a node: all of them if stride x ranks fits in one, else node / stride."""
    if stride * ranks <= gpus_per_node:
        return ranks
    return max(1, gpus_per_node // stride)


def group_link(hw: HardwareSpec, ranks: int, stride: int, gpus_per_node: int, topology: Topology) -> Link:
    """The ring of one group: the node's fabric when it fits in a node, else min(fabric, 0.92 x k x NIC) with k
    of its ranks per node and the inter-node alpha (the rail-NIC rule, docs/hardware.md)."""
    inside = node_link(hw, ranks, Topology.pcie if topology is Topology.pcie else Topology.nvlink)
    local = ranks_per_node(ranks, stride, gpus_per_node)
    if local >= ranks:
        return inside
    nic = NIC_EFFICIENCY * local * hw.nic_gbps_per_gpu
    label = "multinode (NIC-bound)" if nic < inside.busbw_gbps else f"multinode ({inside.label}-bound)"
    return Link(ranks=ranks, busbw_gbps=min(inside.busbw_gbps, nic), alpha_us=hw.inter_node_alpha_us, label=label)


def p2p_link(hw: HardwareSpec, stride: int, gpus_per_node: int, topology: Topology) -> Link:
    """One pipeline neighbour to the next, `stride` ranks away: the fabric in a node, one NIC (x 0.92) across."""
    if stride < gpus_per_node:
        return group_link(hw, 2, stride, gpus_per_node, topology)
    return Link(ranks=2, busbw_gbps=NIC_EFFICIENCY * hw.nic_gbps_per_gpu, alpha_us=hw.inter_node_alpha_us,
                label="multinode (NIC-bound)")


def mesh_groups(mesh: Mesh, hw: HardwareSpec, gpus_per_node: int, topology: Topology) -> dict[str, Group]:
    """tp, cp, ep, the dense data-parallel group (dp x cp, stride tp), the experts' (dp x cp / ep, stride tp x ep)
    and the pipeline neighbour (stride tp x cp x dp), placed in the order tp-cp-ep-dp-pp."""
    dense = mesh.dp * mesh.cp
    experts = max(1, dense // mesh.ep)
    etp = mesh.etp or mesh.tp  # Megatron's expert grid: etp (tp by default) fastest, then ep, then expert dp
    shape = {
        "tp": (mesh.tp, 1),
        "cp": (mesh.cp, mesh.tp),
        "ep": (mesh.ep, etp),
        "dp": (dense, mesh.tp),  # cp then dp are adjacent, so dp x cp ranks are tp apart
        "expert dp": (experts, etp * mesh.ep),
    }
    groups = {name: Group(name, n, stride, group_link(hw, n, stride, gpus_per_node, topology))
              for name, (n, stride) in shape.items()}
    stride = mesh.tp * mesh.cp * mesh.dp
    groups["pp"] = Group("pp", mesh.pp, stride, p2p_link(hw, stride, gpus_per_node, topology))
    return groups
