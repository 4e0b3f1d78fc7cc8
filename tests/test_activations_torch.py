"""zeroplan's activation figure against what PyTorch really keeps: a quick slice of the validation grid.

Optional validation: needs torch and transformers (skipped when absent). One sequence length and one
micro-batch per family, every attention and checkpointing mode the grid measures, bf16 and fp32; the
whole grid (and the cases left out, with the reason) is validation/measure_activations.py.
"""

from __future__ import annotations

import importlib

import pytest

pytestmark = pytest.mark.torch

TOLERANCE = 0.10  # the bar; the closed forms are exact up to a few 0-d tensors


@pytest.fixture(scope="module")
def validation():
    """validation/measure_activations.py, imported only when these tests run (torch takes seconds to import)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    torch.set_num_threads(1)  # the tiny ops run several times faster on one thread
    return importlib.import_module("validation.measure_activations")


@pytest.mark.parametrize("family", ["llama", "llama-gqa", "gemma2", "gpt2", "gpt2-nodropout", "gpt2-tanh", "llama-relu",
                                    "mixtral", "t5"])
def test_predicted_within_tolerance_of_measured(validation, family):
    rows = validation.run(validation.grid([family], quick=True))
    assert rows, f"no measurable case for {family}"
    for case, measured, predicted in rows:
        assert abs(predicted - measured) <= TOLERANCE * measured, (case, measured, predicted)


def test_cpu_tensors_counted_as_cuda_keeps_them(validation):
    """Dropout runs as native_dropout (a bool mask); bf16 LayerNorm mean/rstd count as fp32."""
    import torch

    x = torch.ones(2, 8, requires_grad=True)
    with validation.cuda_like_dropout():
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            torch.nn.functional.dropout(x, p=0.5, training=True)
    assert [t.dtype for t in saved] == [torch.bool]

    norm = torch.nn.LayerNorm(8).to(torch.bfloat16)
    rec = validation.Recorder(norm)
    rec.module_stack.append(norm)
    with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
        norm(x.to(torch.bfloat16))
    assert sorted(rec.saved.values()) == [2 * 4, 2 * 4, 2 * 8 * 2]  # mean and rstd in fp32, input in bf16
