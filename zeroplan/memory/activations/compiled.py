"""torch.compile of each block (--compile): what AOTAutograd's min-cut partitioner saves instead of eager's tensors,
without checkpointing and under torchtitan's full and per-op selective checkpointing.

torchtitan and torchtune compile each transformer block (torch.compile(block), inductor). The partitioner
(torch._functorch.partitioners.min_cut_rematerialization_partition) recomputes cheap pointwise ops in the backward
rather than saving their outputs. Measured with validation/measure_compile.py and validation/measure_compile_ac.py
(torch==2.13.0, inductor, CPU, transformers==5.25.0 Llama / Qwen2 / Qwen3 / Mistral / Granite blocks in bf16, SDPA;
validation/compile_measured.json, validation/compile_ac_measured.json).

No checkpointing: one compiled block keeps eager's saved tensors less
  - each RMSNorm's fp32 copy of its input (x.float(), which eager's pow and mul save): 4 B per normed element;
    the partitioner keeps the bf16 tensors and recomputes the upcast;
  - the MLP activation's output (act(gate), which eager's product with up saves): e B per T x f element;
    recomputed from the saved gate projection.
Everything else (norm statistics, the block input and the projections' inputs, q/k/v, the attention output and
log-sum-exp, gate and up, the down projection's input) is kept as eager keeps it.

Full checkpointing (torchtitan: checkpoint_wrapper(block), then block.compile()): the compiled block saves its input
only (and the generator state preserve_rng_state keeps: 16 B on CUDA, not counted); its compiled backward recomputes
the forward, modelled as rebuilding the no-checkpointing saved set above less the input, as eager's recompute is.

Per-op selective (torchtitan SelectiveAC, checkpointing.op_sac_kept's rule): a MUST_SAVE output is saved only where
the compiled backward reads it: the kept q, k, v, o, gate and up projection outputs (o's rebuilds the residual stream
the MLP norm reads) and the attention kernel's output and log-sum-exp; the down projection's output, which only feeds
the block's output, is not (eager's SAC cache keeps it). The compiled backward recomputes the rest of the
no-checkpointing saved set.
Pure: no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.checkpointing import attention_kernel_bytes, checkpointed_layers, op_sac_kept
from zeroplan.memory.activations.ops import FP32_BYTES
from zeroplan.memory.activations.terms import layer_terms
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.setup import Attention, Checkpointing, TrainingSetup
from zeroplan.models.architecture import Architecture

# The families measured (Llama-style dense decoders: RMSNorm, separate q/k/v/o and gate/up/down linears, SDPA).
COMPILE_FAMILIES = frozenset({"granite", "llama", "mistral", "qwen2", "qwen3"})
# The eager terms (memory.activations.terms) whose fp32 input copy the partitioner drops, and the normed width.
_NORM_TERMS = ("attention norm", "MLP norm", "q norm", "k norm")
MEASURED_COMPUTE_BYTES = 2  # bf16, as validation/measure_compile.py ran
ACTIVATION_TERM = "activation"  # act(gate): recomputed in backward from the saved gate projection
# Projection outputs a compiled backward never reads: down's feeds only the block's output (the residual addition's
# backward saves nothing). o's does feed the MLP norm's input, which the backward rebuilds (measured: Qwen2 keeps it).
UNREAD_PROJECTIONS = frozenset({"down"})
SHARED_PROJECTIONS = frozenset({"v", "gate", "up"})  # kept outputs the no-checkpointing set holds as they are
INPUT_SITE = "layer input"
KERNEL_SITE = "attention kernel output and log-sum-exp"
COMPILE_ASSUMPTION = ("--compile: saved tensors as AOTAutograd's min-cut partitioner keeps them, measured on CPU "
                      "(torch 2.13 inductor); GPU kernels may differ")
COMPILE_AC_ASSUMPTION = ("--compile under checkpointing (torchtitan: checkpoint wrapper, then compile per block): "
                         "the compiled backward recomputes the no-checkpointing compiled saved set less what the "
                         "block keeps; the compiled selective-op block keeps only the policy's outputs its "
                         "backward reads (not the down projection's)")


@dataclass(frozen=True, slots=True)
class CompiledLayer:
    """One compiled block under one checkpointing mode: what its backward receives, by site, and what it rebuilds."""

    kept: tuple[tuple[str, int], ...]  # (site, bytes): none: the eager term names; else INPUT_SITE, projections...
    recompute: int  # what the compiled backward recomputes (0 without checkpointing)

    @property
    def kept_bytes(self) -> int:
        return sum(v for _, v in self.kept)


def check_compile(arch: Architecture, setup: TrainingSetup) -> None:
    """ZeroplanError for a --compile run zeroplan has not measured."""
    if arch.family not in COMPILE_FAMILIES or arch.is_moe or not arch.gated_mlp:
        raise ZeroplanError(f"--compile: modelled for dense {', '.join(sorted(COMPILE_FAMILIES))} only, not {arch.family}"
                            f"{' (MoE)' if arch.is_moe else ''}")
    if setup.precision.compute_bytes != MEASURED_COMPUTE_BYTES:
        raise ZeroplanError("--compile: modelled for a 16-bit compute dtype only (measured in bf16)")
    if setup.attention is not Attention.flash:
        raise ZeroplanError("--compile: modelled with --attention flash (SDPA) only")


def compiled_terms(terms: list[tuple[str, int]], arch: Architecture, tokens: int) -> list[tuple[str, int]]:
    """One layer's eager terms as a compiled block keeps them without checkpointing (the module docstring)."""
    widths = {"attention norm": arch.hidden_size, "MLP norm": arch.hidden_size,
              "q norm": arch.num_attention_heads * arch.head_dim, "k norm": arch.num_key_value_heads * arch.head_dim}
    out = []
    for name, value in terms:
        if name == ACTIVATION_TERM:
            continue
        if name in _NORM_TERMS:
            value -= FP32_BYTES * tokens * widths[name]
        out.append((name, value))
    return out


def compiled_layer(arch: Architecture, b: int, s: int, e: int, ckpt: Checkpointing) -> CompiledLayer:
    """What one compiled block keeps for its backward under `ckpt` (none, full or selective-op), by site.

    The stable entry point for other terms (a float8 delta reads the sites it changes): sites are the eager term
    names without checkpointing, INPUT_SITE under full, and INPUT_SITE, "<name> projection output" and KERNEL_SITE
    under selective-op. Flash (SDPA) attention and a 16-bit compute dtype, as check_compile requires.
    """
    none = tuple(compiled_terms(layer_terms(arch, traits_of(arch), b, s, e, flash=True, selective=False), arch, b * s))
    if ckpt is Checkpointing.none:
        return CompiledLayer(kept=none, recompute=0)
    full = sum(v for _, v in none)
    block_input = e * b * s * arch.hidden_size  # in the no-checkpointing set too (the attention norm's input)
    if ckpt is Checkpointing.full:
        return CompiledLayer(kept=((INPUT_SITE, block_input),), recompute=full - block_input)
    if ckpt is not Checkpointing.selective_op:
        raise ZeroplanError(f"--compile: not modelled with --checkpointing {ckpt.value}")
    projections = tuple((f"{name} projection output", v) for name, v in op_sac_kept(arch, b, s, e)
                        if name not in UNREAD_PROJECTIONS)
    kernel = attention_kernel_bytes(arch, b, s, e, flash=True)
    kept = ((INPUT_SITE, block_input), *projections, (KERNEL_SITE, kernel))
    return CompiledLayer(kept=kept, recompute=full - block_input - kernel - _shared_with_none(projections))


def _shared_with_none(projections: tuple[tuple[str, int], ...]) -> int:
    """Kept projection outputs that are themselves in the no-checkpointing set: v (SDPA reads it as it is), gate and
    up (the product reads them). q and k reach SDPA through rotary (Qwen3: through their norms) as new tensors."""
    return sum(v for name, v in projections if name.split()[0] in SHARED_PROJECTIONS)


@dataclass(frozen=True, slots=True)
class CompiledStack:
    """The decoder stack compiled block by block: one layer's no-checkpointing terms, each layer's kept bytes in
    order, and what one checkpointed layer's compiled backward recomputes."""

    terms: tuple[tuple[str, int], ...]
    each: tuple[int, ...]
    recompute: int


def compiled_stack(arch: Architecture, b: int, s: int, e: int, ckpt: Checkpointing, every: int = 1) -> CompiledStack:
    """Every layer compiled under `ckpt`; full with every > 1 (torchtitan's layer SAC) checkpoints layers N, 2N, ...
    and leaves the others as compiled without checkpointing. Selective (Korthikanti) with flash is none."""
    none = compiled_layer(arch, b, s, e, Checkpointing.none)
    if ckpt is Checkpointing.selective:  # activation_bytes maps it to none under flash; eager attention is refused
        ckpt = Checkpointing.none
    one = compiled_layer(arch, b, s, e, ckpt)
    wrapped = checkpointed_layers(arch.num_layers, every) if ckpt is Checkpointing.full else (True,) * arch.num_layers
    each = tuple(one.kept_bytes if c else none.kept_bytes for c in wrapped)
    return CompiledStack(terms=none.kept, each=each, recompute=one.recompute if any(wrapped) else 0)
