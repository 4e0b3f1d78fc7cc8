"""DeepSpeed's PipelineModule layer split (zeroplan/models/partition.py): hand-derived cases of its documented
algorithm, and the table validation/ds_pipeline.py made by running DeepSpeed's own partition_uniform and
partition_balanced (deepspeedai/DeepSpeed@edaa7221 deepspeed/runtime/utils.py) on the same inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.models.partition import (
    layer_weights,
    module_items,
    partition_balanced,
    partition_uniform,
    stage_layer_split,
)
from zeroplan.models.presets import load_model

MEASURED = json.loads((Path(__file__).parent.parent / "validation" / "ds_pipeline.json").read_text())


@pytest.mark.parametrize("items, parts, bounds", [
    (10, 4, (0, 3, 6, 8, 10)),  # 10 // 4 = 2 each, the first 10 % 4 = 2 parts one more: 3, 3, 2, 2
    (8, 4, (0, 2, 4, 6, 8)),
    (2, 4, (0, 1, 2, 2, 2)),  # fewer items than parts: one each, the rest empty
    (0, 2, (0, 0, 0)),
])
def test_uniform_split(items, parts, bounds):
    assert partition_uniform(items, parts) == bounds


@pytest.mark.parametrize("weights, parts, bounds", [
    ([1, 1, 1, 1], 2, (0, 2, 4)),  # the only spread-0 cut
    # [1] | [0, 1] and [1, 0] | [1] both have spread 0: the tie goes to the larger cut (DeepSpeed's >=)
    ([1, 0, 1], 2, (0, 2, 3)),
    # [5] | [1, 1, 1, 1] | [5]: parts 5, 4, 5, spread 1; every other cut spreads at least 3
    ([5, 1, 1, 1, 1, 5], 3, (0, 1, 5, 6)),
    ([3, 4], 3, (0, 1, 2, 2)),  # no more items than parts: partition_uniform
    ([7], 1, (0, 1)),
])
def test_balanced_split_hand_derived(weights, parts, bounds):
    assert partition_balanced(weights, parts) == bounds


def test_llama_8b_over_four_stages_by_parameters():
    """Items: embedding 128,256 x 4,096 = 525,336,576; 32 layers of 218,112,000; norm 4,096; head 525,336,576.
    7 | 9 | 9 | 7 layers weigh 2,052,120,576 | 1,963,008,000 | 1,963,008,000 | 2,052,124,672 (spread 89,116,672);
    8 | 8 | 8 | 8 spreads 525,336,576 (the embedding's and the head's stages carry their table)."""
    dec = load_model("llama-3.1-8b").config.decoder()
    params, flags = module_items(dec)
    assert (params[0], params[1], params[-2], params[-1], len(params)) == (525_336_576, 218_112_000, 4_096,
                                                                          525_336_576, 35)
    assert sum(flags) == 32
    assert stage_layer_split(dec, 4) == (7, 9, 9, 7)
    assert stage_layer_split(dec, 4, "type:transformer") == (8, 8, 8, 8)
    assert stage_layer_split(dec, 4, "uniform") == (8, 9, 9, 6)  # 35 items: 9, 9, 9, 8; less embedding, norm, head


def test_unknown_method_is_one_line():
    with pytest.raises(ZeroplanError, match="partition_method 'profile'"):
        layer_weights("profile", [1], [True])


def test_zeroplan_equals_deepspeeds_own_functions():
    """validation/ds_pipeline.py ran DeepSpeed's two functions on 3,440 inputs (seeded random weights with ties and
    zeros; every uniform case to 39 items x 11 parts) and on zeroplan's items for 6 presets x pp 2/4/8/16 x
    3 methods: zeroplan's boundaries equal DeepSpeed's on every one."""
    assert MEASURED["partition_random"]["cases"] == 3440
    assert MEASURED["partition_random"]["mismatches"] == []
    for row in MEASURED["partition_presets"]:
        dec = load_model(row["model"]).config.decoder()
        assert list(stage_layer_split(dec, row["pp"], row["method"])) == row["deepspeed_layers"], row
