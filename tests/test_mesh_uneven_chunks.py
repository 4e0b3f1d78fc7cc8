"""Uneven splits under the interleaved and zbv schedules: torchtitan splits num_stages = pp x stages-per-rank with
the same default weights as one chunk per rank; Megatron-LM with vpp keeps refusing what does not split evenly.

Expected chunks are hand-derived from pytorch/torchtitan@238fa99:torchtitan/distributed/pipeline_parallel.py:
generate_llm_fqn_per_model_part(num_stages = pp x v, L, input_weight = output_weight = 1): E = L + 2, E // S per
stage, the first E % S stages one more, the first and last stage less 1; pipeline_module_split's
_get_stage_indices: rank r holds stages r, r + pp, ... (loop) or r and 2 pp - 1 - r (zbv's V)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from zeroplan.cli.app import app
from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.pipeline import rank_layers
from zeroplan.megatron.mapping import megatron_args
from zeroplan.models.mesh import Mesh, Schedule, megatron_problems, split_problems
from zeroplan.models.presets import load_model


@pytest.mark.parametrize(("layers", "mesh", "chunks"), [
    # 32 layers, 4 x 3 = 12 stages: E 34, 2 each, the first 10 one more: 2, 3 x 9, 2, 1
    (32, Mesh(gpus=4, pp=4, vpp=3), (((0, 1), (11, 13), (23, 25)), ((2, 4), (14, 16), (26, 28)),
                                     ((5, 7), (17, 19), (29, 30)), ((8, 10), (20, 22), (31, 31)))),
    # 126 layers (Llama 3.1 405B), 8 x 2 = 16 stages: E 128, 8 each: 7, 8 x 14, 7
    (126, Mesh(gpus=8, pp=8, vpp=2), tuple(((8 * r - (r > 0), 8 * r + 6), (63 + 8 * r, 63 + 8 * r + 7 - (r == 7)))
                                           for r in range(8))),
    # 30 layers, zbv on 4 ranks = 8 stages: E 32, 4 each: 3, 4 x 6, 3; rank r holds stages r and 7 - r
    (30, Mesh(gpus=4, pp=4, schedule=Schedule.zbv), (((0, 2), (27, 29)), ((3, 6), (23, 26)), ((7, 10), (19, 22)),
                                                     ((11, 14), (15, 18)))),
])
def test_chunks_split_as_torchtitan_splits_its_virtual_stages(layers, mesh, chunks):
    assert split_problems(mesh, layers) == []
    assert rank_layers(layers, mesh) == chunks
    assert sum(b - a + 1 for rank in chunks for a, b in rank) == layers


def test_a_split_that_leaves_a_stage_empty_is_one_line():
    assert split_problems(Mesh(gpus=8, pp=8, vpp=5), 32) == [
        "32 layers do not split into --pp 8 x --vpp 5 = 40 pipeline stages: torchtitan's split of 34 effective layers "
        "(embedding and head weigh one each) leaves a stage empty"]


def test_first_and_last_counts_stay_one_chunk_per_rank():
    assert "are not modelled (one chunk per rank only)" in split_problems(
        Mesh(gpus=8, pp=4, vpp=2, pp_first_layers=4), 32)[0]


def test_estimate_counts_each_ranks_own_chunks():
    result = CliRunner().invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--pp", "4", "--vpp", "3",
                                      "--grad-accum", "8", "--stage", "1", "-f", "json"])
    assert result.exit_code == 0, result.output
    ranks = json.loads(result.stdout)["mesh"]["ranks"]
    assert [[b - a + 1 for a, b in r["layers"]] for r in ranks] == [[2, 3, 3], [3, 3, 3], [3, 3, 2], [3, 3, 1]]


def test_a_rank_with_unlike_chunks_counts_its_largest_chunk_per_chunk_micro_batch():
    """The stated upper bound (docs/parallelism.md): in-flight chunk-micro-batches x the rank's largest chunk."""
    from zeroplan.memory.activations.mesh import in_flight, rank_activations, stage_activations
    from zeroplan.memory.setup import TrainingSetup

    arch, setup = load_model("llama-3.1-8b").architecture(), TrainingSetup(seq_len=2048, grad_accum=8)
    mesh = Mesh(gpus=4, pp=4, vpp=3)
    one, _ = rank_activations(arch, setup, mesh)
    stages, _ = stage_activations(arch, setup, mesh)
    n = in_flight(mesh, 8)
    assert n == (15, 13, 11, 9)  # min((v - 1) g + 2 (pp - 1 - r) + 1, m v), v 3, g = 8 / 2 rounds = 4
    assert stages[2].layers_bytes == n[2] * (sum(one.layer_bytes[5:8]) + one.held_bytes)  # chunks of 3, 3, 2 layers
    assert stages[3].layers_bytes == n[3] * (sum(one.layer_bytes[8:11]) + one.held_bytes)  # 3, 3, 1


@pytest.mark.parametrize(("pp", "vpp", "message"), [
    (2, 3, "16 layers per rank is not a multiple of --vpp 3: Megatron-LM's rule"),
    (4, 3, "8 layers per rank is not a multiple of --vpp 3: Megatron-LM's rule"),
    (3, 2, "32 layers do not split evenly into --pp 3 stages"),
])
def test_megatron_with_vpp_keeps_even_chunks(pp, vpp, message):
    mesh = Mesh(gpus=pp, pp=pp, vpp=vpp)
    assert split_problems(mesh, 32) == []  # zeroplan's own method splits it as torchtitan does
    with pytest.raises(ZeroplanError, match=message):
        megatron_args(load_model("llama-3.1-8b").architecture(), mesh, seq_len=4096, micro_batch=1,
                      distributed_optimizer=False, recompute=None)


def test_megatron_takes_an_even_interleaved_split():
    assert megatron_problems(Mesh(gpus=4, pp=4, vpp=2), 32) == []  # 8 per rank, 4 per chunk
