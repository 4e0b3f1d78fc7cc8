"""DeepSeek-V4's activation formula (memory/activations/deepseek_v4.py) against measurement. Torch-free.

validation/activations_deepseek_v4.json is data measured by validation/measure_deepseek_v4.py: what a transformers
5.25 training forward of three tiny configs still keeps when it returns (widths, heads, hc_mult, Sinkhorn
iterations, compress rates with and without a remainder, indexer shapes and router score functions varied), in
bf16 and fp32, b 1 and 2, s 32 and 64, without, with full and with selective checkpointing. Each config is read by
zeroplan's own reader, so the reader's Architecture is what is held to the measurement
(validation/compare_deepseek_v4.py, which also writes the docs table).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from validation.compare_deepseek_v4 import DATA, LABELS_SLACK, architecture, compared, estimate
from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.setup import Attention, Precision, TrainingSetup
from zeroplan.models.families import parse_family_config

_arch = architecture


def _estimate(row: dict, **change):
    if not change:
        return estimate(row)
    setup = TrainingSetup(precision=Precision.bf16_mixed if row["dtype"] == "bf16" else Precision.fp32,
                          seq_len=row["seq_len"], micro_batch=row["micro_batch"], attention=Attention.eager)
    return activation_bytes(replace(_arch(row["case"]), **change), setup)


def _rows(checkpointing: str | None = None) -> list[dict]:
    """The cast rows (zeroplan's assumption), of one checkpointing or all."""
    return [r for r in DATA["cases"] if checkpointing in (None, r["checkpointing"]) and r["weights"] == "cast"]


def test_the_grid_varies_what_a_formula_could_be_fitted_to():
    configs = DATA["configs"].values()
    assert len({(c.get("hidden_size"), c.get("hc_mult"), c.get("hc_sinkhorn_iters")) for c in configs}) == 3
    assert {r["checkpointing"] for r in DATA["cases"]} == {"none", "full", "selective"}
    assert {r["weights"] for r in DATA["cases"]} == {"cast", "loaded"}
    assert len(DATA["cases"]) == 96


def _id(row: dict) -> str:
    return "-".join(str(row[k]) for k in ("case", "weights", "dtype", "checkpointing", "micro_batch", "seq_len"))


@pytest.mark.parametrize("case", compared(), ids=lambda c: _id(c[0]))
def test_every_measured_case_to_the_labels_padding(case):
    """Cast weights: zeroplan's figure; loaded (fp32 modules kept): plus the difference docs/activations.md states."""
    row, measured, predicted, _ = case
    assert 0 <= measured - predicted <= LABELS_SLACK, (measured, predicted)


@pytest.mark.parametrize("case", [c for c in compared() if c[0]["checkpointing"] == "none"], ids=lambda c: _id(c[0]))
def test_each_layer_kind_to_the_byte(case):
    """Sliding, CSA and HCA layers, hash and top-k routed: each layer's own bytes, exactly."""
    row, _, _, layers = case
    assert list(layers) == row["layers"]


def test_fp32_keeps_nothing_apart_when_loaded():
    """In fp32 the loaded and the cast model save the same: nothing is kept in another dtype."""
    fp32 = {(r["case"], r["seq_len"], r["micro_batch"], r["weights"]): r["total"] for r in _rows("none")
            if r["dtype"] == "fp32"}
    assert all(total == fp32[key[:3] + ("cast",)] for key, total in fp32.items())


def test_full_checkpointing_keeps_the_hyper_connection_streams():
    row = next(r for r in _rows("full") if r["case"] == "wide")
    n, h = DATA["configs"]["wide"]["hc_mult"], DATA["configs"]["wide"]["hidden_size"]
    e = 2 if row["dtype"] == "bf16" else 4
    assert row["layers"] == [e * row["micro_batch"] * row["seq_len"] * n * h] * 3
    assert list(_estimate(row).layer_bytes) == row["layers"]


def test_the_indexer_keeps_nothing():
    """The lightning indexer's shapes are no input of the formula: its top-k indices are integers, so what it saved
    is freed before the forward returns. The measured CSA layers (two indexer shapes: base and rates) agree to the
    byte without an indexer term (test_each_layer_kind_to_the_byte)."""
    config = dict(DATA["configs"]["base"]) | {"index_n_heads": 16, "index_head_dim": 32, "index_topk": 2}
    assert parse_family_config(config, strict=False).architecture() == _arch("base")
    assert (DATA["configs"]["base"]["index_n_heads"], DATA["configs"]["rates"]["index_n_heads"]) == (2, 3)


@pytest.mark.parametrize(("change", "message"), [
    ({"router_score": "softmax"}, "scoring_func 'softmax'"),  # ACT2FN has none: transformers cannot build it
    ({"attention_dropout": 0.1}, "attention_dropout 0.1"),  # a mask on the probabilities, not measured
])
def test_what_the_formula_does_not_cover_is_one_error(change, message):
    with pytest.raises(ZeroplanError, match=message):
        _estimate(_rows("none")[0], **change)


def test_flash_is_counted_as_eager_and_said():
    row = _rows("none")[0]
    setup = TrainingSetup(precision=Precision.bf16_mixed, seq_len=row["seq_len"], micro_batch=row["micro_batch"],
                          attention=Attention.flash)
    acts = activation_bytes(_arch(row["case"]), setup)
    assert acts.total_bytes == _estimate(row | {"dtype": "bf16"}).total_bytes
    assert any("no SDPA/flash path" in a for a in acts.assumptions)
