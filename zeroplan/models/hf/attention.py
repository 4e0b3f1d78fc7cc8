"""Attention functions for the meta-device forward: they save what the GPU kernel saves, not what meta computes.

On the meta device SDPA would run its math path and save the a x s x s scores. `zp_meta_kernel` instead saves
what FlashAttention / SDPA's flash and memory-efficient kernels keep for backward: q, k, v (k and v with their
own g heads: transformers passes them un-repeated, and the kernels take GQA as it is), the output and the fp32
log-sum-exp, b x a x s (torch's `_scaled_dot_product_flash_attention` and flash-attn's `_flash_attn_forward`
return these; pytorch/pytorch aten/src/ATen/native/transformers/attention.cpp). `zp_meta_eager` runs the
model's own `eager_attention_forward` (scores and probabilities kept, as eager does) with a dense mask.
Both mark the core so the recorder knows what a selective recompute would make again. Registered through
transformers' AttentionInterface / AttentionMaskInterface, the public way to add an attention implementation
(transformers docs, "Attention interface"). Imports torch; loaded by zeroplan.models.hf.probe only.
"""

from __future__ import annotations

import sys

import torch
from transformers import AttentionInterface, AttentionMaskInterface

FLASH, EAGER = "zp_meta_kernel", "zp_meta_eager"  # no "sdpa"/"flash" prefix: transformers special-cases those
LSE_DTYPE = torch.float32


class CoreMarks:
    """Where the recorder is told a core starts and ends (set by probe.Recorder while it records)."""

    enter = staticmethod(lambda q, k, v, mask: None)
    leave = staticmethod(lambda: None)


class _FlashSaved(torch.autograd.Function):
    """Output of the right shape; saves q, k, v, output and log-sum-exp, as the flash kernels do."""

    @staticmethod
    def forward(ctx, query, key, value):
        b, a, s, _ = query.shape
        out = _like_layout(query, (b, a, s, value.shape[-1]))  # SDPA's output takes the query's memory layout
        lse = query.new_empty((b, a, s), dtype=LSE_DTYPE)
        ctx.save_for_backward(query, key, value, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):  # never run: the meta forward is only recorded
        query, key, value, _, _ = ctx.saved_tensors
        return torch.zeros_like(query), torch.zeros_like(key), torch.zeros_like(value)


def _like_layout(query: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """An empty (b, a, s, d_v) tensor whose dims lie in memory in the order the query's do."""
    order = sorted(range(query.dim()), key=lambda i: -query.stride(i))
    physical = query.new_empty([shape[i] for i in order])
    return physical.permute([order.index(i) for i in range(query.dim())])


def flash_attention(module, query, key, value, attention_mask, **kwargs):
    """As transformers' sdpa_attention_forward returns it: (b, s, a, d_v), contiguous (a copy where q was not)."""
    CoreMarks.enter(query, key, value, attention_mask)
    try:
        return _FlashSaved.apply(query, key, value).transpose(1, 2).contiguous(), None
    finally:
        CoreMarks.leave()


def eager_attention(module, query, key, value, attention_mask, **kwargs):
    impl = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if impl is None:
        raise NotImplementedError(f"{type(module).__name__}: its modeling file has no eager_attention_forward")
    CoreMarks.enter(query, key, value, attention_mask)
    try:
        return impl(module, query, key, value, attention_mask, **kwargs)
    finally:
        CoreMarks.leave()


def no_mask(*args, **kwargs):
    """The flash kernels apply causality and windows themselves: no mask tensor."""
    return None


def dense_mask(batch_size, q_length, kv_length, *args, dtype=torch.float32, **kwargs):
    """The b x 1 x q x kv additive mask eager attention adds (transformers.masking_utils.eager_mask's shape)."""
    return torch.empty((batch_size, 1, q_length, kv_length), dtype=dtype, device="meta")


def register() -> None:
    AttentionInterface.register(FLASH, flash_attention)
    AttentionInterface.register(EAGER, eager_attention)
    AttentionMaskInterface.register(FLASH, no_mask)
    AttentionMaskInterface.register(EAGER, dense_mask)
