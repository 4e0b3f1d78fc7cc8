"""The gated delta net's activation rule (memory/activations/gated_delta.py) against one Qwen3.5 delta net measured
alone over 1 to 4 chunks (validation/delta_net_measured.json, written by validation/measure_delta_net.py). Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validation.compare_new_families import ARCHS
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.activations.gated_delta import CHUNK, delta_net_terms
from zeroplan.memory.setup import Precision, TrainingSetup

DATA = json.loads((Path(__file__).resolve().parents[1] / "validation" / "delta_net_measured.json").read_text())
BYTES = {"bf16": 2, "fp32": 4}
# The measured module tells storages apart by address; the CPU allocator may give a saved tensor the address of
# one freed earlier (the discarded final state's graph), so the measured figure can fall under the formula, never
# over it. The worst such case in the file is under 1%.
OVER = 0.01


@pytest.mark.parametrize("row", DATA["cases"], ids=lambda r: f"{r['module']}-{r['dtype']}-b{r['micro_batch']}-s{r['seq_len']}")
def test_formula_is_never_under_the_measured_delta_net_and_at_most_one_percent_over(row):
    formula = sum(v for _, v in delta_net_terms(ARCHS["qwen3_5_text"], row["micro_batch"], row["seq_len"],
                                                BYTES[row["dtype"]]))
    assert row["measured"] <= formula <= (1 + OVER) * row["measured"], (row, formula)


def test_measured_cases_span_several_chunks():
    assert {-(-r["seq_len"] // CHUNK) for r in DATA["cases"]} >= {1, 3, 4}


def test_chunk_matrices_grow_with_the_padded_length():
    """s = 65 pads to two chunks of 64: the c x c matrices double against s = 64."""
    arch = ARCHS["qwen3_5_text"]
    one, two = (dict(delta_net_terms(arch, 1, s, 2))["delta net chunk matrices (c x c per chunk)"] for s in (64, 65))
    assert two == 2 * one


def test_output_names_the_torch_path_and_the_gate():
    est = activation_bytes(ARCHS["qwen3_5_text"], TrainingSetup(seq_len=64, precision=Precision.bf16_mixed))
    assert any("torch_chunk_gated_delta_rule" in n and "flash-linear-attention" in n for n in est.assumptions)
    names = {t.name for t in est.layer_terms}
    assert "delta net chunk matrices (c x c per chunk)" in names  # the delta net layer is the largest here
