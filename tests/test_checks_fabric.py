"""zero3-slow-fabric: ZeRO-3 over PCIe or several nodes without hpZ fires, with or without a modelled overhead."""

import pytest

from zeroplan.check.findings import RunContext
from zeroplan.check.rules import run_checks
from zeroplan.check.rules.fabric import SLOW_FABRIC_WARN_PCT, FabricEvidence
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import Parallelism

RUN = RunContext(parallelism=Parallelism(gpus=32, nodes=4))


def fired(topology, *, stage=3, overhead=None, run=RUN, **zero):
    config = parse_ds_config({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage, **zero}})
    found = run_checks(config, run, evidence={"throughput": FabricEvidence(topology, overhead)})
    return [f for f in found if f.rule == "zero3-slow-fabric"]


def test_multinode_without_hpz_fires_with_the_fix():
    (finding,) = fired(Topology.multinode)
    assert finding.severity == "warning" and finding.key == "zero_optimization.zero_hpz_partition_size"
    assert finding.message.startswith("ZeRO-3 across 4 nodes without hpZ")
    assert "set zero_hpz_partition_size to 8 (ZeRO++ hpZ)" in finding.message


def test_overhead_in_the_message_or_said_to_be_unmodelled():
    # Without a throughput figure (no hardware profile) the message says the overhead is not modelled.
    assert "not modelled without a hardware profile" in fired(Topology.multinode)[0].message
    (finding,) = fired(Topology.multinode, overhead=34.4)
    assert "predicted step time +34% vs ZeRO-0" in finding.message and "not modelled without a hardware profile" not in finding.message


def test_a_small_predicted_overhead_is_only_info():
    (finding,) = fired(Topology.multinode, overhead=SLOW_FABRIC_WARN_PCT - 9)
    assert finding.severity == "info" and f"under the {SLOW_FABRIC_WARN_PCT:g}% worth a warning" in finding.message
    assert fired(Topology.multinode, overhead=SLOW_FABRIC_WARN_PCT)[0].severity == "warning"


def test_pcie_fires_whatever_hpz_says():
    (finding,) = fired(Topology.pcie, overhead=12.0, zero_hpz_partition_size=8)
    assert finding.message.startswith("ZeRO-3 over PCIe") and "+12%" in finding.message
    assert finding.key == "zero_optimization.stage"


@pytest.mark.parametrize(
    ("topology", "stage", "zero"),
    [(Topology.nvlink, 3, {}), (Topology.multinode, 3, {"zero_hpz_partition_size": 8}),
     (Topology.multinode, 2, {}), (Topology.pcie, 2, {}), (Topology.pcie, 0, {})],
)  # fmt: skip
def test_quiet(topology, stage, zero):
    assert fired(topology, stage=stage, **zero) == []


def test_needs_the_evidence():
    config = parse_ds_config({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})
    assert [f for f in run_checks(config, RUN) if f.rule == "zero3-slow-fabric"] == []
