"""The mesh step-time model (zeroplan/perf/mesh.py; docs/throughput.md "Mesh"): each term against its formula,
placement against Megatron's rank order, and the degenerate mesh against the data-parallel model."""

from __future__ import annotations

from functools import cache

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.memory.mesh import MeshModel, stage_shares
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    Parallelism,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.models.mesh import Mesh, Schedule
from zeroplan.models.params import count_params
from zeroplan.models.presets import load_model
from zeroplan.perf.collectives import NIC_EFFICIENCY
from zeroplan.perf.mesh import mesh_layout, mesh_step
from zeroplan.perf.throughput import estimate_throughput

H100 = load_hardware("h100-sxm-80gb")
SETUP = TrainingSetup(seq_len=4096, micro_batch=1, grad_accum=8)
KNOBS = DeepSpeedKnobs()


@cache
def _spec(name: str):
    spec = load_model(name)
    return spec, spec.architecture(), count_params(spec), spec.config.decoder()


def layout(name: str = "llama-3.1-8b", nodes: int | None = None, **degrees):
    _, arch, params, decoder = _spec(name)
    mesh = Mesh(**degrees)
    par = Parallelism(gpus=mesh.gpus, nodes=nodes or max(1, mesh.gpus // H100.gpus_per_node))
    return mesh_layout(MeshModel(mesh, stage_shares(decoder, mesh)), arch, params, H100, par)


@pytest.mark.parametrize("stage", list(ZeroStage))
@pytest.mark.parametrize("gpus", [8, 32])
def test_data_parallel_mesh_is_the_data_parallel_model(stage, gpus) -> None:
    """tp = pp = cp = ep = 1: the same step, compute and MFU as perf/throughput.estimate_throughput."""
    lay = layout(gpus=gpus)
    _, arch, params, _ = _spec("llama-3.1-8b")
    par = Parallelism(gpus=gpus, nodes=gpus // 8)
    want = estimate_throughput(params, arch, H100, SETUP, par, stage, KNOBS)
    got = mesh_step(lay, SETUP, stage, KNOBS)
    assert got.step_time_s == pytest.approx(want.step_time_s, rel=1e-12)
    assert got.compute_s == pytest.approx(want.compute_s, rel=1e-12)
    assert got.mfu == pytest.approx(want.mfu, rel=1e-12)


def test_tp_collectives_per_layer() -> None:
    """4 all-reduces per layer (2 forward, 2 backward) of b s h e: l x 4 x (alpha + 2(t-1)/t S / B)."""
    lay = layout(gpus=8, tp=8)
    step = mesh_step(lay, SETUP, ZeroStage.zero1, KNOBS)
    size = 4096 * 4096 * 2
    one = 40e-6 + 2 * 7 / 8 * size / 360e9
    assert step.cost.tp_s == pytest.approx(32 * 4 * one)
    assert step.cost.tp_bytes == pytest.approx(32 * 4 * 2 * 7 / 8 * size)


def test_sequence_parallel_same_bytes_twice_the_latency() -> None:
    plain = mesh_step(layout(gpus=8, tp=4), SETUP, ZeroStage.zero1, KNOBS).cost
    sp = mesh_step(layout(gpus=8, tp=4, sequence_parallel=True), SETUP, ZeroStage.zero1, KNOBS).cost
    assert sp.tp_bytes == plain.tp_bytes
    assert sp.tp_s - plain.tp_s == pytest.approx(32 * 4 * 40e-6)


def test_full_recompute_adds_the_forward_collectives() -> None:
    lay = layout(gpus=8, tp=8)
    full = mesh_step(lay, TrainingSetup(seq_len=4096, grad_accum=8, checkpointing=Checkpointing.full),
                     ZeroStage.zero1, KNOBS).cost
    plain = mesh_step(lay, SETUP, ZeroStage.zero1, KNOBS).cost
    assert full.tp_bytes == pytest.approx(plain.tp_bytes * 6 / 4)


@pytest.mark.parametrize(("schedule", "vpp", "bubble"), [
    (Schedule.one_f_one_b, None, 3), (Schedule.gpipe, None, 3), (Schedule.interleaved, 2, 1.5), (Schedule.zbv, None, 0),
])
def test_bubble_in_micro_batch_times(schedule, vpp, bubble) -> None:
    """(p - 1) per step for 1F1B/GPipe, (p - 1)/v interleaved (arXiv:2104.04473), 0 for ZB-V (arXiv:2401.10241)."""
    step = mesh_step(layout(gpus=16, tp=2, pp=4, vpp=vpp, schedule=schedule), SETUP, ZeroStage.zero1, KNOBS)
    assert step.bubble_s == pytest.approx(bubble * step.cost.micro_batch_s)


def test_interleaved_zero_bubble_is_refused() -> None:
    with pytest.raises(ZeroplanError, match="interleaved-zb"):
        mesh_step(layout(gpus=16, pp=4, vpp=2, schedule=Schedule.interleaved_zero_bubble), SETUP, ZeroStage.zero1,
                  KNOBS)


def test_p2p_sends_per_chunk() -> None:
    """One activation forward and one gradient backward per chunk; interleaving with v chunks sends v times."""
    one = mesh_step(layout(gpus=16, tp=2, pp=4), SETUP, ZeroStage.zero1, KNOBS).cost
    two = mesh_step(layout(gpus=16, tp=2, pp=4, vpp=2, schedule=Schedule.interleaved), SETUP, ZeroStage.zero1,
                    KNOBS).cost
    assert one.p2p_bytes == 2 * 4096 * 4096 * 2
    assert two.p2p_bytes == 2 * one.p2p_bytes


def test_placement_follows_megatron_order() -> None:
    """tp fastest: tp 8 fills a node (NVLink), dp ranks are 8 apart (one per node: 0.92 x one NIC), pp too."""
    groups = layout(gpus=64, tp=8, pp=2).groups
    assert groups["tp"].link.label == "nvlink"
    assert groups["dp"].link.busbw_gbps == pytest.approx(NIC_EFFICIENCY * H100.nic_gbps_per_gpu)
    assert groups["pp"].stride == 32 and groups["pp"].spans_nodes
    small = layout(gpus=64, tp=2).groups["dp"]  # 4 of its ranks per node: 4 NICs' worth of ring bandwidth
    assert small.link.busbw_gbps == pytest.approx(NIC_EFFICIENCY * 4 * H100.nic_gbps_per_gpu)


def test_tp_across_nodes_warns() -> None:
    assert "spans nodes" in layout(gpus=16, tp=16).warnings[0]
    assert layout(gpus=16, tp=8).warnings == ()


def test_cp_ring_hidden_when_attention_dominates() -> None:
    """K/V blocks of GQA Llama are small next to the block's attention compute at s = 32768: nothing exposed;
    bytes = (cp - 1) l x 3 passes x 2 (s/cp) (kv/t) d_h e."""
    setup = TrainingSetup(seq_len=32768, grad_accum=8)
    cost = mesh_step(layout(gpus=16, tp=2, cp=4), setup, ZeroStage.zero1, KNOBS).cost
    assert cost.cp_exposed_s == 0 < cost.cp_comm_s
    assert cost.cp_bytes == 3 * 32 * 3 * 2 * (32768 / 4) * (8 // 2) * 128 * 2


def test_ep_all_to_all_bytes() -> None:
    """Per MoE layer 4 all-to-alls (dispatch, combine; forward, backward) of T k h e, (ep - 1)/ep leaving the rank."""
    _, arch, _, _ = _spec("gpt-oss-20b")
    step = mesh_step(layout("gpt-oss-20b", gpus=8, ep=8), SETUP, ZeroStage.zero1, KNOBS)
    size = 4096 * arch.num_experts_per_tok * arch.hidden_size * 2
    assert step.cost.ep_bytes == pytest.approx(arch.num_moe_layers * 4 * 7 / 8 * size)
    assert step.ep_s > 0


def test_cache_is_reused_and_results_agree() -> None:
    lay = layout(gpus=16, tp=2, pp=2)
    first = mesh_step(lay, SETUP, ZeroStage.zero3, KNOBS)
    assert lay.cache
    assert mesh_step(lay, SETUP, ZeroStage.zero3, KNOBS) == first


def test_cli_throughput_on_a_mesh_states_the_mesh_and_every_term(runner) -> None:
    import json

    from zeroplan.cli.app import app

    args = ["throughput", "-m", "llama-3.1-70b", "--gpus", "64", "--tp", "8", "--pp", "4", "--grad-accum", "16",
            "-f", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["mesh"] | {"description": None} == {"tp": 8, "pp": 4, "cp": 1, "ep": 1, "dp": 2, "vpp": None,
                                                     "schedule": "1f1b", "sequence_parallel": False, "cp_comm": "p2p",
                                                     "description": None}
    row = data["stages"][1]
    assert set(row["terms"]) == {"tp", "cp", "ep", "p2p", "bubble", "zero"}
    lay = layout("llama-3.1-70b", gpus=64, tp=8, pp=4)
    want = mesh_step(lay, TrainingSetup(seq_len=2048, grad_accum=16), ZeroStage.zero1, KNOBS)
    assert row["step_time_s"] == pytest.approx(want.step_time_s)
    assert row["terms"]["bubble"]["seconds"] == pytest.approx(want.bubble_s)
    assert any(a.startswith("TP: 2 all-reduces") for a in data["assumptions"])


@pytest.mark.parametrize(("extra", "message"), [
    (["--tp", "3"], "num_attention_heads (64) is not a multiple of --tp 3"),
    (["--pp", "4", "--vpp", "2", "--pp-schedule", "interleaved-zb"], "states no bubble"),
    (["--tp", "2", "--sweep", "auto"], "data-parallel only"),
    (["--pp", "4", "--vpp", "2", "--pp-schedule", "1f1b"], "--vpp 2 interleaves model chunks: give --pp-schedule interleaved-1f1b, interleaved-zb or zbv, not 1f1b"),
    (["--pp", "4", "--vpp", "4", "--pp-schedule", "zbv"], "--pp-schedule zbv runs exactly 2 model chunks per rank (PyTorch's ScheduleZBVZeroBubble); --vpp 4 given"),
])
def test_cli_throughput_mesh_refusals_are_one_line(runner, extra, message) -> None:
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["throughput", "-m", "llama-3.1-70b", "--gpus", "48", *extra])
    assert result.exit_code == 1
    assert message in result.stderr and "Traceback" not in result.stderr


def test_cli_warns_when_tp_spans_nodes(runner) -> None:
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["throughput", "-m", "llama-3.1-8b", "--gpus", "16", "--nodes", "4", "--tp", "8"])
    assert result.exit_code == 0
    assert "tensor parallel 8 spans nodes (4 GPUs per node)" in result.stderr
