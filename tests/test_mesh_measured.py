"""zeroplan's per-rank figures on a tensor-parallel mesh against PyTorch's tensor-parallel API, measured on CPU.

validation/tp_measured.json is what validation/measure_tp.py measured (torch 2.13, gloo): a Llama-shaped model
at TP 1, 2 and 4, and TP 2 x FSDP2 2 on a 2-D mesh, with and without sequence parallelism, every rank. This test recomputes zeroplan's side now.
"""

import json
from pathlib import Path

import pytest

from validation.tp_predicted import predicted

DATA = json.loads((Path(__file__).parent.parent / "validation" / "tp_measured.json").read_text())
ROWS = DATA["rows"]


def test_every_mesh_the_issue_names_was_measured():
    cases = {(r["tp"], r["dp"], r["sequence_parallel"]) for r in ROWS}
    assert cases == {(1, 1, False), (2, 1, False), (4, 1, False), (2, 2, False), (2, 1, True), (4, 1, True), (2, 2, True)}
    assert len(ROWS) == 1 + 2 + 4 + 4 + 2 + 4 + 4


@pytest.mark.parametrize("row", ROWS, ids=[f"tp{r['tp']}-dp{r['dp']}-sp{int(r['sequence_parallel'])}-rank{r['rank']}" for r in ROWS])
def test_rank_within_2_percent_and_states_exact(row):
    want = predicted(row["tp"], row["dp"], row["sequence_parallel"])
    for key in ("parameters", "gradients", "optimizer"):
        assert want[key] == row[key], key
    assert abs(want["activations"] - row["activations"]) / row["activations"] < 0.02
