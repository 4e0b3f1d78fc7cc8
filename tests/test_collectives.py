"""Ring cost and topology links, hand-computed from nccl-tests doc/PERFORMANCE.md and docs/hardware.md."""

from __future__ import annotations

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import Parallelism
from zeroplan.perf.collectives import (
    Collective,
    Link,
    default_topology,
    dp_link,
    host_copy_s,
    nic_busbw_gbps,
    ring_factor,
    ring_time_s,
)

NVLINK8 = Link(ranks=8, busbw_gbps=360, alpha_us=40, label="nvlink")


@pytest.mark.parametrize(
    ("collective", "ranks", "factor"),
    [
        (Collective.all_reduce, 8, 2 * 7 / 8),
        (Collective.all_gather, 8, 7 / 8),
        (Collective.reduce_scatter, 8, 7 / 8),
        (Collective.all_reduce, 2, 1.0),
        (Collective.all_gather, 64, 63 / 64),
    ],
    ids=["AR-8-nccl-tests-2(n-1)/n", "AG-8-(n-1)/n", "RS-8-(n-1)/n", "AR-2", "AG-64"],
)
def test_ring_factor_is_nccl_tests_busbw_factor(collective: Collective, ranks: int, factor: float) -> None:
    assert ring_factor(collective, ranks) == pytest.approx(factor, rel=1e-12)


def test_all_reduce_of_1gb_on_8_h100_by_hand() -> None:
    # 40 us + 2 * 7/8 * 1e9 B / 360e9 B/s = 40e-6 + 4.8611e-3 s
    assert ring_time_s(Collective.all_reduce, 1e9, NVLINK8) == pytest.approx(40e-6 + 1.75e9 / 360e9, rel=1e-12)


def test_all_gather_pays_alpha_per_collective() -> None:
    # 42 per-layer all-gathers of 18.48 GB in all: 42 * 40 us + 7/8 * 18.48e9 / 360e9
    t = ring_time_s(Collective.all_gather, 18.48e9, NVLINK8, num_collectives=42)
    assert t == pytest.approx(42 * 40e-6 + 0.875 * 18.48e9 / 360e9, rel=1e-12)


def test_one_rank_issues_no_collective() -> None:
    assert ring_time_s(Collective.all_reduce, 1e9, NVLINK8.model_copy(update={"ranks": 1}), 10) == 0.0


def test_host_copy_over_pcie_gen5() -> None:
    assert host_copy_s(55e9, load_hardware("h100-sxm-80gb")) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("preset", "par", "expected"),
    [
        ("h100-sxm-80gb", Parallelism(gpus=8), Topology.nvlink),
        ("mi300x-192gb", Parallelism(gpus=8), Topology.nvlink),
        ("l40s-48gb", Parallelism(gpus=8), Topology.pcie),
        ("h100-pcie-80gb", Parallelism(gpus=4), Topology.pcie),
        ("h100-sxm-80gb", Parallelism(gpus=16, nodes=2), Topology.multinode),
    ],
    ids=["sxm-nvlink", "xgmi-counts-as-nvlink", "l40s-pcie", "h100-pcie", "two-nodes"],
)
def test_default_topology(preset: str, par: Parallelism, expected: Topology) -> None:
    assert default_topology(load_hardware(preset), par) is expected


@pytest.mark.parametrize(
    ("preset", "busbw", "alpha"),
    [
        ("a100-sxm-80gb", 0.92 * 8 * 25, 100),  # NIC-bound: 184 < 230 (2e "8x200G -> ~190")
        ("h100-sxm-80gb", 360, 100),  # 0.92 * 8 * 50 = 368 > 360 intra-node AG/RS (2e "8x400G -> ~370")
    ],
    ids=["2e-A100-8x200G-NIC-bound", "2e-H100-8x400G-NVLink-bound"],
)
def test_multinode_busbw_is_min_of_intra_and_nic(preset: str, busbw: float, alpha: float) -> None:
    link = dp_link(load_hardware(preset), Parallelism(gpus=16, nodes=2), Topology.multinode)
    assert (link.ranks, link.busbw_gbps, link.alpha_us) == (16, pytest.approx(busbw), alpha)


def test_nic_busbw_formula() -> None:
    assert nic_busbw_gbps(load_hardware("b200-180gb"), 8) == pytest.approx(368.0)


def test_pcie_topology_on_an_nvlink_node_uses_pcie_numbers() -> None:
    link = dp_link(load_hardware("h100-sxm-80gb"), Parallelism(gpus=8), Topology.pcie)
    assert (link.busbw_gbps, link.alpha_us, link.label) == (40, 50, "pcie")


@pytest.mark.parametrize(
    ("preset", "par", "topology", "message"),
    [
        ("l40s-48gb", Parallelism(gpus=8), Topology.nvlink, "l40s-48gb GPUs talk over PCIe"),
        ("h100-sxm-80gb", Parallelism(gpus=8), Topology.multinode, r"more than one node \(nodes = 1\)"),
        ("h100-sxm-80gb", Parallelism(gpus=16, nodes=2), Topology.nvlink, "2 nodes need topology multinode"),
        ("h100-sxm-80gb", Parallelism(gpus=16), Topology.nvlink, "16 GPUs per node .* exceed the 8"),
    ],
    ids=["nvlink-on-pcie-card", "multinode-one-node", "nvlink-two-nodes", "too-many-gpus-per-node"],
)
def test_impossible_topologies_are_errors(preset: str, par: Parallelism, topology: Topology, message: str) -> None:
    with pytest.raises(ZeroplanError, match=message):
        dp_link(load_hardware(preset), par, topology)
