"""The throughput model against published runs (benchmarks/perf_validation.py names each source; docs/throughput.md 6).

Band: the model within -25% / +35% of the measurement. Rows outside it are the model's known disagreements,
kept as strict xfails so a change that fixes (or moves) them is noticed.
"""

from __future__ import annotations

import pytest

validation = pytest.importorskip("benchmarks.perf_validation", reason="benchmarks/ ships only in the repository")

LOW, HIGH = 0.75, 1.35
KNOWN_DISAGREEMENTS = {
    "ZeRO-3 18B GPT, 384 V100, 400 Gb/s/node, 1K tok/GPU": "model over-predicts ZeRO-3 on 100G-class V100 clusters",
    "ZeRO-3 138B GPT, 384 V100, 400 Gb/s/node, 1K tok/GPU": "model over-predicts ZeRO-3 on 100G-class V100 clusters",
    "ZeRO++ 138B GPT, 384 V100, 100 Gb/s/node, 1K tok/GPU": "model over-predicts ZeRO++ at 138B on 100 Gb/s",
}
CASES = [
    pytest.param(case, id=case.label, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_DISAGREEMENTS[case.label])])
    if case.label in KNOWN_DISAGREEMENTS
    else pytest.param(case, id=case.label)
    for case in validation.CASES
]


@pytest.mark.parametrize("case", CASES)
def test_model_within_band_of_measurement(case) -> None:
    assert LOW <= case.predicted() / case.measured <= HIGH


def test_zeropp_gain_direction_matches_the_blog() -> None:
    """ZeRO++ beats ZeRO-3 in every published pair, and by more on the slower network."""
    rows = {c.label: c.predicted() for c in validation.CASES if "V100" in c.label}
    for size in ("18B", "138B"):
        gains = [rows[f"ZeRO++ {size} GPT, 384 V100, {g} Gb/s/node, 1K tok/GPU"]
                 / rows[f"ZeRO-3 {size} GPT, 384 V100, {g} Gb/s/node, 1K tok/GPU"] for g in (400, 100)]  # fmt: skip
        assert 1 < gains[0] < gains[1]
