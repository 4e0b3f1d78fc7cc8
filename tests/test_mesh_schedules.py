"""Pipeline schedules: zeroplan's closed forms for the micro-batches each rank keeps in flight, against the table
validation/pp_schedules.py made by running PyTorch 2.13's own schedule-order generators (committed as data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeroplan.memory.activations.pipeline import (
    chunks_in_flight,
    head_in_flight,
    head_rank,
    rank_stages,
)
from zeroplan.models.mesh import Mesh, Schedule

TABLE = json.loads((Path(__file__).parent.parent / "validation" / "pp_schedules.json").read_text())["rows"]


def _mesh(row) -> Mesh:
    vpp = row["vpp"] if row["vpp"] > 1 and row["schedule"] != "zbv" else None
    return Mesh(gpus=row["pp"], pp=row["pp"], vpp=vpp, schedule=Schedule(row["schedule"]))


def test_the_table_covers_every_schedule():
    assert {r["schedule"] for r in TABLE} == {s.value for s in Schedule}
    assert len(TABLE) > 1000


@pytest.mark.parametrize("schedule", [s.value for s in Schedule])
def test_peak_chunks_in_flight_match_pytorchs_schedules(schedule):
    rows = [r for r in TABLE if r["schedule"] == schedule]
    wrong = [(r["pp"], r["vpp"], r["m"], r["rank"], r["peak"], chunks_in_flight(_mesh(r), r["m"], r["rank"]))
             for r in rows if chunks_in_flight(_mesh(r), r["m"], r["rank"]) != r["peak"]]
    assert not wrong, f"(pp, vpp, m, rank, measured, zeroplan): {wrong[:5]}"


@pytest.mark.parametrize("schedule", [s.value for s in Schedule])
def test_the_heads_chunk_and_the_stages_each_rank_holds(schedule):
    for r in (r for r in TABLE if r["schedule"] == schedule):
        mesh = _mesh(r)
        assert list(rank_stages(mesh, r["rank"])) == r["stages"]
        last = r["pp"] * len(r["stages"]) - 1
        if last in r["stages"]:
            assert r["rank"] == head_rank(mesh)
            assert r["chunk_peaks"][r["stages"].index(last)] == head_in_flight(mesh, r["m"]), r


def test_interleaving_first_rank_matches_megatrons_factor():
    # Megatron-LM's theoretical memory: the first stage holds L/p layers x p micro-batches x (1 + (p - 1) / (p v))
    pp, v, m = 4, 3, 16
    chunks = chunks_in_flight(Mesh(gpus=4, pp=pp, vpp=v, schedule=Schedule.interleaved), m, 0)
    assert chunks * 1 / (pp * v) == pytest.approx(1 / pp * pp * (1 + (pp - 1) / (pp * v)))


def _llama():
    from zeroplan.models.presets import model_facts

    return model_facts("llama-3.1-8b")[2]


def test_interleaved_ranks_hold_their_chunks_times_the_chunks_in_flight():
    from zeroplan.memory.activations.mesh import rank_activations, stage_activations
    from zeroplan.memory.setup import TrainingSetup

    arch, setup = _llama(), TrainingSetup(seq_len=2048, grad_accum=8)
    mesh = Mesh(gpus=4, pp=4, vpp=2)  # 32 layers: 8 chunks of 4; rank 0 holds layers 0-3 and 16-19
    one, _ = rank_activations(arch, setup, mesh)
    stages, _ = stage_activations(arch, setup, mesh)
    chunk = sum(one.layer_bytes[0:4]) + one.held_bytes
    assert [s.layers_bytes for s in stages] == [n * chunk for n in (11, 9, 7, 5)]  # min(4 + 2 (3 - r) + 1, 16)
    assert [s.logits_bytes for s in stages] == [0, 0, 0, one.logits_bytes]


def test_zbv_puts_the_head_on_rank_zero():
    from zeroplan.memory.activations.mesh import rank_activations, stage_activations
    from zeroplan.memory.mesh import stage_shares
    from zeroplan.memory.setup import TrainingSetup
    from zeroplan.models.presets import load_model

    arch, setup = _llama(), TrainingSetup(seq_len=2048, grad_accum=8)
    mesh = Mesh(gpus=4, pp=4, schedule=Schedule.zbv)
    one, _ = rank_activations(arch, setup, mesh)
    stages, _ = stage_activations(arch, setup, mesh)
    assert [s.logits_bytes for s in stages] == [one.logits_bytes, 0, 0, 0]
    shares = stage_shares(load_model("llama-3.1-8b").config.decoder(), mesh)
    assert [s.chunks for s in shares] == [((0, 3), (28, 31)), ((4, 7), (24, 27)), ((8, 11), (20, 23)),
                                          ((12, 15), (16, 19))]
    assert shares[0].total - shares[1].total == 2 * 128_256 * 4096 + 4096  # embedding + head + final norm


def test_gpipe_holds_every_micro_batch():
    from zeroplan.memory.activations.mesh import rank_activations, stage_activations
    from zeroplan.memory.setup import TrainingSetup

    arch, setup = _llama(), TrainingSetup(seq_len=2048, grad_accum=6)
    mesh = Mesh(gpus=2, pp=2, schedule=Schedule.gpipe)
    one, _ = rank_activations(arch, setup, mesh)
    stages, _ = stage_activations(arch, setup, mesh)
    assert stages[1].logits_bytes == 6 * one.logits_bytes
    assert stages[0].layers_bytes == 6 * (sum(one.layer_bytes[:16]) + one.held_bytes)


@pytest.mark.parametrize("args, message", [
    (["--pp", "4", "--pp-schedule", "zbv", "--vpp", "4"], "--pp-schedule zbv runs exactly 2 model chunks per rank"),
    (["--pp", "4", "--pp-schedule", "gpipe", "--vpp", "2"], "--vpp 2 interleaves model chunks: give --pp-schedule"),
    (["--pp", "4", "--vpp", "2", "--grad-accum", "9"], "9 micro-batches (gradient accumulation) is not a multiple of the 2 rounds"),
    (["--pp", "8", "--vpp", "5"], "32 layers do not split into --pp 8 x --vpp 5 = 40 pipeline stages"),
])
def test_schedules_no_stack_runs_are_one_line(runner, args, message):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", *args])
    assert result.exit_code == 1, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("schedule", [s.value for s in Schedule])
def test_cli_lists_every_rank_in_json(runner, schedule):
    from zeroplan.cli.app import app

    vpp = ["--vpp", "2"] if schedule.startswith("interleaved") else []
    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--pp", "4", "--pp-schedule",
                                 schedule, *vpp, "--grad-accum", "8", "--stage", "1", "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    ranks = data["mesh"]["ranks"]
    mesh = Mesh(gpus=8, pp=4, vpp=2 if vpp else None, schedule=Schedule(schedule))
    assert [r["in_flight"] for r in ranks] == [chunks_in_flight(mesh, 8, r) for r in range(4)]
    assert max(r["peak_bytes"]["1"] for r in ranks) == data["stages"][0]["gpu_bytes"]["total"]  # the busiest rank


@pytest.mark.parametrize("mesh", [Mesh(gpus=4, pp=4), Mesh(gpus=8, pp=4, vpp=2), Mesh(gpus=8, tp=2, pp=4),
                                  Mesh(gpus=4, pp=4, pipe_partition="parameters")],
                         ids=["1f1b", "interleaved", "tp2", "deepspeed-pipe"])
def test_activation_bytes_without_notes_equal_the_breakdown(mesh):
    """The bytes-only path the search and the estimate read (memory.mesh.mesh_activation_bytes, notes=False) gives
    every rank the same figures as the breakdown `zeroplan estimate` prints, and leaves out only the mesh's
    assumption lines (pipeline schedule, pipe buffers) that the breakdown adds."""
    from zeroplan.memory.activations.mesh import stage_activations
    from zeroplan.memory.setup import TrainingSetup

    arch, setup = _llama(), TrainingSetup(seq_len=2048, grad_accum=8)
    shown, _ = stage_activations(arch, setup, mesh)
    bare, _ = stage_activations(arch, setup, mesh, notes=False)
    assert [s.total_bytes for s in bare] == [s.total_bytes for s in shown]
    assert [s.pipe_buffer_bytes for s in bare] == [s.pipe_buffer_bytes for s in shown]
    assert all(len(b.assumptions) < len(s.assumptions) for b, s in zip(bare, shown, strict=True))
    assert all(any("pipeline schedule" in a for a in s.assumptions) for s in shown)
