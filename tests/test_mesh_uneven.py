"""Uneven pipeline splits: torchtitan's default where the layers do not divide, Megatron-LM's first/last counts.

Expected splits are hand-derived from pytorch/torchtitan@02ef790:torchtitan/distributed/pipeline_parallel.py
generate_llm_fqn_per_model_part (input_weight = output_weight = 1, the config's defaults): E = L + 2, E // S per
stage, the first E % S stages one more, first and last stage less 1; and from NVIDIA/Megatron-LM
megatron/core/transformer/transformer_config.py (the middle stages split L - first - last evenly)."""

import json

import pytest
from typer.testing import CliRunner

from zeroplan.cli.app import app
from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.pipeline import stage_layer_counts


@pytest.mark.parametrize(("layers", "stages", "split"), [
    (126, 4, (31, 32, 32, 31)),  # E 128, 32 each
    (126, 8, (15,) + (16,) * 6 + (15,)),  # E 128, 16 each
    (126, 16, (7,) + (8,) * 14 + (7,)),  # E 128, 8 each
    (30, 4, (7, 8, 8, 7)),  # E 32, 8 each
    (5, 2, (3, 2)),  # E 7: 4, 3
    (3, 2, (2, 1)),  # E 5: 3, 2
    (32, 4, (8, 8, 8, 8)),  # divides: equal stages
])
def test_default_split_is_torchtitans(layers, stages, split):
    assert stage_layer_counts(layers, stages) == split
    assert sum(split) == layers


def test_first_and_last_counts_are_megatrons():
    assert stage_layer_counts(126, 8, 14, 16) == (14,) + (16,) * 6 + (16,)
    assert stage_layer_counts(126, 8, first=7) == (7,) + (17,) * 7
    with pytest.raises(ZeroplanError, match="= 97 do not split evenly over the 6 middle"):
        stage_layer_counts(126, 8, 13, 16)


def test_405b_on_pp8_estimates_every_rank():
    result = CliRunner().invoke(app, ["estimate", "--model", "llama-3.1-405b", "--gpus", "64", "--tp", "8", "--pp", "8",
                                      "--grad-accum", "8", "--stage", "1", "-f", "json"])
    assert result.exit_code == 0, result.output
    ranks = json.loads(result.stdout)["mesh"]["ranks"]
    assert [b - a + 1 for r in ranks for a, b in r["layers"]] == list(stage_layer_counts(126, 8))
    assert ranks[1]["parameters"] > ranks[0]["parameters"]  # 16 layers outweigh 15 and the embedding shard


def test_megatron_method_still_refuses_an_uneven_split():
    result = CliRunner().invoke(app, ["estimate", "--model", "llama-3.1-405b", "--gpus", "64", "--tp", "8", "--pp", "8",
                                      "--method", "megatron", "--stage", "1"])
    assert result.exit_code == 1
    assert "do not split evenly into --pp 8" in result.stderr
