"""Checkpointing as the training stacks spell it: which layers are checkpointed, and what torchtitan's per-op
selective checkpointing keeps.

Pure: no I/O. Symbols as in zeroplan.memory.activations. Sources (docs/activations.md, checkpointing):
  every:N       torchtitan layer SAC, `selective_ac_option = N`: `_layer_sac_count += 1; if count % N == 0:
                checkpoint_wrapper(block)` (pytorch/torchtitan@1f029641b5caeb4df18ac094263e8bcc674b3686:
                torchtitan/distributed/activation_checkpoint.py lines 27-50): layers N, 2N, ... counted from 1
  selective-op  torchtitan SelectiveAC (pytorch/torchtitan@b5bcd76c66d0acb1a08b176d9639425bc55e0b2a:
                torchtitan/distributed/activation_checkpoint.py lines 31-94, 243-287): inside each checkpointed
                block, create_selective_checkpoint_contexts keeps the outputs of the save ops (mm, addmm, bmm,
                the SDPA flash / efficient kernels, ...: torch._functorch.partitioners' compute_intensive_ops
                plus linear, max, topk) except every second mm, counted per block; everything else is recomputed.
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.ops import FP32_BYTES
from zeroplan.memory.setup import Checkpointing, TrainingSetup
from zeroplan.models.architecture import Architecture

# Families whose decoder layer is LlamaDecoderLayer's: q, k, v, o, gate, up, down as separate nn.Linear.
OP_SAC_FAMILIES = frozenset({"llama", "mistral", "qwen2"})
# Qwen2Attention's q/k/v projections have a bias: aten.linear runs them as addmm, which SelectiveAC saves and its
# every-other rule does not count (the rule counts aten.mm and aten.linear only).
QKV_BIAS_FAMILIES = frozenset({"qwen2"})


def checkpointed_layers(num_layers: int, every: int) -> tuple[bool, ...]:
    """Which layers (in order) a full checkpoint wraps: every one for every=1, else the N-th, 2N-th, ..."""
    return tuple((i + 1) % every == 0 for i in range(num_layers))


def check_supported(arch: Architecture, setup: TrainingSetup, eager_only: bool) -> None:
    """ZeroplanError for the combinations zeroplan does not model (rather than a number it cannot stand by)."""
    if setup.checkpoint_every > 1 and setup.checkpointing is not Checkpointing.full:
        raise ZeroplanError("checkpoint_every applies to full checkpointing only (--checkpointing every:N)")
    if setup.checkpoint_every > 1 and arch.num_encoder_layers:
        raise ZeroplanError(f"--checkpointing every:N: not modelled for encoder-decoder {arch.family}")
    if setup.checkpointing is not Checkpointing.selective_op or setup.compile:  # compiled.check_compile's families
        return
    if arch.family not in OP_SAC_FAMILIES or arch.is_moe or not arch.gated_mlp:
        raise ZeroplanError(f"--checkpointing selective-op (torchtitan's per-op policy) is modelled for "
                            f"{', '.join(sorted(OP_SAC_FAMILIES))} only, not {arch.family}")


def _projections(arch: Architecture) -> list[tuple[str, int, bool]]:
    """(name, output width, counted by the every-other-mm rule) in the order a LlamaDecoderLayer runs them."""
    a, g, d, h, f = (arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim, arch.hidden_size,
                     arch.intermediate_size)
    counted = arch.family not in QKV_BIAS_FAMILIES
    return [("q", a * d, counted), ("k", g * d, counted), ("v", g * d, counted), ("o", h, True),
            ("gate", f, True), ("up", f, True), ("down", h, True)]


def op_sac_kept(arch: Architecture, b: int, s: int, e: int) -> list[tuple[str, int]]:
    """Projection outputs SelectiveAC keeps in one layer: addmm always, mm the 1st, 3rd, ... of the block."""
    t, kept, count = b * s, [], 0
    for name, width, counted in _projections(arch):
        if counted:
            count += 1
            if count % 2 == 0:
                continue
        kept.append((name, e * t * width))
    return kept


def attention_kernel_bytes(arch: Architecture, b: int, s: int, e: int, *, flash: bool) -> int:
    """What the policy keeps of the attention core. Flash: the SDPA flash / efficient kernel's outputs, attention
    output (e T a d) and log-sum-exp (4 b a s). Eager: HF's two batched matmuls (bmm is a save op): the raw scores
    q k^T (e b a s^2) and probabilities x v (e T a d); the softmax between them is recomputed."""
    a, out = arch.num_attention_heads, e * b * s * arch.num_attention_heads * arch.head_dim
    return out + (FP32_BYTES * b * a * s if flash else e * b * a * s * s)


def op_sac_layer_terms(arch: Architecture, b: int, s: int, e: int, *, flash: bool) -> list[tuple[str, int]]:
    """One block under SelectiveAC: its input (the checkpoint's argument), the kept outputs and the core's."""
    terms = [("layer input", e * b * s * arch.hidden_size)]
    terms += [(f"{name} projection output", v) for name, v in op_sac_kept(arch, b, s, e)]
    core = "attention kernel output and log-sum-exp" if flash else "attention scores and output (two bmm)"
    terms.append((core, attention_kernel_bytes(arch, b, s, e, flash=flash)))
    return terms


def _read_by_backward(arch: Architecture, b: int, flash: bool) -> frozenset[str]:
    """Kept outputs the block's own backward reads (so its recompute need not make them again): gate (SiLU saves
    its input), up (the gate product saves it) and v: SDPA saves v as it is; the eager matmul saves it only
    when it needs no copy (b = 1 and no repeat_kv, see attention.eager_fresh_qkv_copies). q and k reach the core
    through rotary as new tensors; the o and down outputs feed residual additions, which save nothing."""
    v_as_is = flash or (b == 1 and arch.num_key_value_heads == arch.num_attention_heads)
    return frozenset({"gate", "up"} | ({"v"} if v_as_is else set()))


def op_sac_recompute_bytes(arch: Architecture, b: int, s: int, e: int, layer_full: int, own_input: int, *,
                           flash: bool) -> int:
    """What recomputing one block allocates in backward: its saved set without checkpointing, less its input and
    less the kept tensors that saved set reads (flash: the kernel's outputs too; eager: neither bmm output is
    saved, the scores are scaled and the output copied before the o projection)."""
    read = _read_by_backward(arch, b, flash)
    reused = sum(v for name, v in op_sac_kept(arch, b, s, e) if name in read)
    kernel = attention_kernel_bytes(arch, b, s, e, flash=True) if flash else 0
    return layer_full - own_input - reused - kernel


def op_sac_recomputed_params(arch: Architecture) -> int:
    """Weights of the projections SelectiveAC does not keep (one layer): their mms run again in backward."""
    kept = {name for name, _ in op_sac_kept(arch, 1, 1, 1)}
    inputs = {"o": arch.num_attention_heads * arch.head_dim, "down": arch.intermediate_size}
    return sum(width * inputs.get(name, arch.hidden_size) for name, width, _ in _projections(arch) if name not in kept)
