"""A slice of validation/measure_engines.py: real FSDP1 and FSDP2 runs on 2 CPU processes match zeroplan."""

from __future__ import annotations

import importlib

import pytest

pytestmark = pytest.mark.torch


def test_two_ranks_match_prediction():
    pytest.importorskip("torch")
    m = importlib.import_module("validation.measure_engines")
    configs = [c for c in m.CONFIGS if c[0] in ("fsdp FULL_SHARD", "fsdp2 reshard=True")]
    table = m.compare(m.run((2,), configs, ("bf16-mixed",)))
    assert len(table) == 2
    for row in table:
        assert row["states_err"] <= 0.02 and row["peak_err"] <= 0.10, row
