"""CI rule over the fabric ZeRO-3 communicates on: PCIe, or several nodes without ZeRO++ hpZ.

ZeRO-3 all-gathers the parameters in forward and again in backward and reduce-scatters the gradients,
every micro-step: 3 Psi per micro-step against ZeRO-0's 2 Psi per optimizer step (ZeRO paper §7; DeepSpeed's
"50% communication overhead", docs/_posts/2021-03-08-zero3-offload.md). On NVLink that hides under compute;
over PCIe or NICs it often does not.
hpZ (`zero_hpz_partition_size` = GPUs per node) keeps a secondary parameter copy inside each node, so
the backward all-gather stays off the NICs (ZeRO++, arXiv:2306.10209).

The evidence "throughput" is a FabricEvidence: the plan's topology and ZeRO-3's predicted step-time
overhead over ZeRO-0 (checkrun.fabric_evidence fills it from zeroplan.perf when that is importable).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from zeroplan.check.findings import Finding, Rule, RunContext
from zeroplan.deepspeed.reader import DeepSpeedConfig
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import ZeroStage

# Below this predicted overhead the finding is info, not a warning: the source article accepts ZeRO-3's
# throughput loss "within 11 %" at batch sizes above 512 (its section 3.3; docs/advisor.md).
SLOW_FABRIC_WARN_PCT = 10.0


@dataclass(frozen=True)
class FabricEvidence:
    """Where the data-parallel GPUs talk, and what ZeRO-3 costs there."""

    topology: Topology
    overhead_pct: float | None = None  # ZeRO-3 step time over ZeRO-0's, percent; None without hardware


def check_slow_fabric(config: DeepSpeedConfig, run: RunContext, *, throughput: FabricEvidence) -> Iterator[Finding]:
    topology = throughput.topology
    if config.stage is not ZeroStage.zero3 or topology is Topology.nvlink:
        return
    overhead, severity = throughput.overhead_pct, "warning"
    if overhead is None:
        cost = "the overhead vs ZeRO-0 is not modelled without a hardware profile"
    else:
        cost = f"predicted step time {overhead:+.0f}% vs ZeRO-0"
        if overhead < SLOW_FABRIC_WARN_PCT:
            severity, cost = "info", f"{cost}, under the {SLOW_FABRIC_WARN_PCT:g}% worth a warning"
    if topology is Topology.pcie:
        yield Finding(rule="zero3-slow-fabric", severity=severity, key="zero_optimization.stage", message=(
            f"ZeRO-3 over PCIe: two parameter all-gathers and a gradient reduce-scatter every micro-step; {cost}; "
            "ZeRO-2 gathers no parameters, so prefer it where it fits"))  # fmt: skip
        return
    if config.knobs.zero_hpz_partition_size > 1:
        return
    per_node = run.parallelism.gpus_per_node if run.parallelism else "the GPUs per node"
    nodes = f"{run.parallelism.nodes} nodes" if run.parallelism else "several nodes"
    yield Finding(rule="zero3-slow-fabric", severity=severity, key="zero_optimization.zero_hpz_partition_size", message=(
        f"ZeRO-3 across {nodes} without hpZ: every micro-step's parameter all-gathers cross the NICs; {cost}; set "
        f"zero_hpz_partition_size to {per_node} (ZeRO++ hpZ), and consider zero_quantized_weights and "
        "zero_quantized_gradients"))  # fmt: skip


FABRIC_RULES = (
    Rule("zero3-slow-fabric", "warning", "ZeRO-3 over PCIe, or over several nodes without ZeRO++ hpZ, with the "
         "predicted overhead vs ZeRO-0", "ZeRO paper §7 (3 Psi per step); ZeRO++ arXiv:2306.10209 (hpZ); "
         "deepspeedai/DeepSpeed@edaa7221:docs/_posts/2021-03-08-zero3-offload.md", check_slow_fabric,
         needs=("throughput",)),
)  # fmt: skip
