"""The check runner: plan arguments and globs, evidence for the rules (the perf hook included), exit codes."""

import dataclasses
import importlib.machinery
import sys
import types

import pytest

from zeroplan.check.planfiles import load_plan
from zeroplan.check.runner import check_plans, expand_plans, fabric_evidence
from zeroplan.errors import UsageError
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import ZeroStage

MULTINODE = "params: 7e9\nhardware: h100-sxm-80gb\ngpus: 16\nnodes: 2\ndeepspeed:\n  train_batch_size: 16\n" \
            "  zero_optimization: {stage: 3}\n"  # fmt: skip
# ZeRO-3 over PCIe with 32 micro-steps of accumulation: ZeRO-0 reduces once per step, ZeRO-3 gathers
# every micro-step, so the predicted overhead is far past the warning threshold.
PCIE_ZERO3 = "params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ntopology: pcie\ndeepspeed:\n  train_batch_size: 256\n" \
             "  train_micro_batch_size_per_gpu: 1\n  zero_optimization: {stage: 3}\n"  # fmt: skip


def test_expand_plans_sorts_globs_dedupes_and_keeps_what_matches_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("b.yaml", "a.yaml", "c.yml"):
        (tmp_path / name).write_text("")
    assert expand_plans(["*.yaml", "a.yaml", "none/*.yaml", "x.yaml"]) == ["a.yaml", "b.yaml", "none/*.yaml", "x.yaml"]


def test_check_plans_rejects_unknown_ignore_ids_before_reading():
    with pytest.raises(UsageError, match="--ignore: unknown rule 'low-headroo'; did you mean low-headroom"):
        check_plans(["whatever.yaml"], ignore=["low-headroo"])


def test_exit_code_follows_strict(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(PCIE_ZERO3, encoding="utf-8")
    assert check_plans([str(path)]).exit_code == 0  # zero3-slow-fabric is a warning
    assert check_plans([str(path)], strict=True).exit_code == 1
    assert check_plans([str(path)], strict=True, ignore=["zero3-slow-fabric"]).exit_code == 0


@pytest.fixture
def multinode(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(MULTINODE, encoding="utf-8")
    return load_plan(path)


@pytest.fixture
def fake_perf(monkeypatch):
    """A stand-in zeroplan.perf with estimate_throughput's signature that records calls: pins the call checkrun makes."""
    calls = []

    def estimate_throughput(params, arch, hw, setup, par, stage, knobs, topology=None, mfu=None):
        calls.append((params.num_params, hw.name, par.nodes, int(stage), topology))
        return types.SimpleNamespace(overhead_vs_zero0_pct=41.5, topology=topology)

    fake = types.ModuleType("zeroplan.perf.throughput")
    fake.__spec__ = importlib.machinery.ModuleSpec("zeroplan.perf.throughput", None)
    fake.estimate_throughput = estimate_throughput
    monkeypatch.setitem(sys.modules, "zeroplan.perf.throughput", fake)
    return calls


def test_with_perf_the_overhead_comes_from_the_throughput_model(multinode, fake_perf):
    evidence = fabric_evidence(multinode)
    assert (evidence.topology, evidence.overhead_pct) == (Topology.multinode, 41.5)
    assert fake_perf == [(7_000_000_000, "h100-sxm-80gb", 2, 3, Topology.multinode)]
    (finding,) = [f for f in check_plans([multinode.origin]).findings if f.rule == "zero3-slow-fabric"]
    assert "predicted step time +42% vs ZeRO-0" in finding.message


def test_fabric_evidence_skips_the_model_where_the_rule_cannot_fire(multinode, fake_perf):
    nvlink = dataclasses.replace(multinode, topology=Topology.nvlink)
    zero2 = dataclasses.replace(multinode, config=multinode.config.model_copy(update={"stage": ZeroStage.zero2}))
    assert fabric_evidence(nvlink).overhead_pct is None and fabric_evidence(zero2).overhead_pct is None
    assert fake_perf == []
