"""Checkpointing policies and loss variants against what PyTorch really keeps: a quick slice of
validation/measure_checkpointing.py (every:N, torchtitan's selective-op through create_selective_checkpoint_contexts,
the no-upcast and torchtune-chunked losses). Optional: needs torch and transformers (skipped when absent).
"""

from __future__ import annotations

import importlib

import pytest

pytestmark = pytest.mark.torch

TOLERANCE = 0.02  # the bar for every measured case


@pytest.fixture(scope="module")
def validation():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    torch.set_num_threads(1)
    return importlib.import_module("validation.measure_checkpointing")


@pytest.mark.parametrize("family", ["llama-gqa", "qwen2", "mistral", "llama-v128"])
def test_policies_and_losses_within_tolerance_of_measured(validation, family):
    rows = validation.run(validation.grid([family], quick=True))
    assert {c.checkpointing for c, _, _ in rows} >= {"every:2", "every:3", "selective-op"}
    assert {c.loss.value for c, _, _ in rows} >= {"no-upcast", "chunked"}
    for case, measured, predicted in rows:
        assert abs(predicted - measured) <= TOLERANCE * measured, (case, measured, predicted)


def test_the_policy_is_torchtitan_s(validation):
    """Every second mm recomputed, bmm and the attention kernels kept, elementwise ops recomputed."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, SelectiveCheckpointContext

    policy, ctx = validation.torchtitan_policy(), SelectiveCheckpointContext(is_recompute=False)
    mm, bmm, mul = torch.ops.aten.mm.default, torch.ops.aten.bmm.default, torch.ops.aten.mul.Tensor
    got = [policy(ctx, op) for op in (mm, mm, bmm, mm, mul)]
    assert got == [CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE, CheckpointPolicy.MUST_SAVE,
                   CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE]
