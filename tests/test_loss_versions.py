"""transformers' causal-LM loss by version (--loss hf, hf-shift, hf-legacy) against validation/loss_versions.json
(validation/measure_loss_versions.py, measured on CPU with the op sequences of 4.45.2, 4.47.1 and the installed one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeroplan.memory.activations.loss import loss_bytes
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.setup import Loss
from zeroplan.models.presets import model_from_data

DATA = json.loads((Path(__file__).resolve().parents[1] / "validation" / "loss_versions.json").read_text())
BF16 = 2
# what the measurement sees and zeroplan does not count: the 0-d loss and its gradient (8 B each at most)
SLACK = 64


def formula(row):
    arch = model_from_data({"model_type": "llama", "hidden_size": row["h"], "intermediate_size": 4 * row["h"],
                            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
                            "vocab_size": row["vocab"]}, "tiny", hf_name="tiny").architecture()
    return loss_bytes(arch, traits_of(arch), row["b"], row["s"], BF16, Loss(row["loss"]))


@pytest.mark.parametrize("row", DATA["rows"], ids=lambda r: f"{r['loss']}-b{r['b']}-s{r['s']}")
def test_each_version_keeps_what_was_measured(row):
    f = formula(row)
    # hf pads the labels (nn.functional.pad, 8 b (s + 1) B) before slicing them: zeroplan counts the 8 b s it keeps
    # only; the backward's peak comes once the labels are released
    labels = 8 * row["b"] * (row["s"] + 1)
    padded = labels if row["loss"] == "hf" else 0
    assert f.logits == row["logits"]
    assert f.logits + f.saved + f.transient == pytest.approx(row["forward_peak"], abs=padded + SLACK)
    assert f.saved == pytest.approx(row["after_forward"], abs=padded + SLACK)
    assert f.backward == pytest.approx(row["backward_peak"], abs=labels + SLACK)


@pytest.mark.parametrize("loss", ["hf-shift", "hf-legacy"])
def test_the_estimate_takes_each_version_from_its_option(loss):
    """--loss hf-shift / hf-legacy reach the estimate: its logits and loss lines are the version's formula."""
    from zeroplan.api import estimate

    result = estimate(model="llama-3.1-8b", gpus=1, engine="none", seq_len=2048, micro_batch=2, loss=loss)
    arch = result.scenario.arch
    f = loss_bytes(arch, traits_of(arch), 2, 2048, BF16, Loss(loss))
    assert (result.activations.logits_bytes, result.activations.loss_bytes) == (f.logits, f.saved + f.transient)
    assert f.saved + f.transient > loss_bytes(arch, traits_of(arch), 2, 2048, BF16, Loss.hf).saved
