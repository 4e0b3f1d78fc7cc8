"""torch.compile of each block (--compile): what AOTAutograd's min-cut partitioner saves instead of eager's tensors.

torchtitan and torchtune compile each transformer block (torch.compile(block), inductor). The partitioner
(torch._functorch.partitioners.min_cut_rematerialization_partition) recomputes cheap pointwise ops in the backward
rather than saving their outputs. Measured with validation/measure_compile.py (torch==2.13.0, inductor, CPU,
transformers==5.25.0 Llama / Qwen3 / Mistral blocks in bf16, SDPA, no checkpointing; validation/compile_measured.json),
one compiled block keeps eager's saved tensors less:
  - each RMSNorm's fp32 copy of its input (x.float(), which eager's pow and mul save): 4 B per normed element;
    the partitioner keeps the bf16 tensors and recomputes the upcast;
  - the MLP activation's output (act(gate), which eager's product with up saves): e B per T x f element;
    recomputed from the saved gate projection.
Everything else (norm statistics, the projections' inputs, q/k/v, the attention output and log-sum-exp, gate and
up, the down projection's input) is kept as eager keeps it. Pure: no torch, no I/O.
"""

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.ops import FP32_BYTES
from zeroplan.memory.setup import Attention, Checkpointing, TrainingSetup
from zeroplan.models.architecture import Architecture

# The families validation/measure_compile.py measured (Llama-style dense decoders with an RMSNorm and a gated MLP).
COMPILE_FAMILIES = frozenset({"llama", "mistral", "qwen3"})
# The eager terms (memory.activations.terms) whose fp32 input copy the partitioner drops, and the normed width.
_NORM_TERMS = ("attention norm", "MLP norm", "q norm", "k norm")
MEASURED_COMPUTE_BYTES = 2  # bf16, as validation/measure_compile.py ran
ACTIVATION_TERM = "activation"  # act(gate): recomputed in backward from the saved gate projection
COMPILE_ASSUMPTION = ("--compile: saved tensors as AOTAutograd's min-cut partitioner keeps them, measured on CPU "
                      "(torch 2.13 inductor); GPU kernels may differ")


def check_compile(arch: Architecture, setup: TrainingSetup) -> None:
    """ZeroplanError for a --compile run zeroplan has not measured."""
    if arch.family not in COMPILE_FAMILIES or arch.is_moe or not arch.gated_mlp:
        raise ZeroplanError(f"--compile: modelled for dense {', '.join(sorted(COMPILE_FAMILIES))} only, not {arch.family}"
                            f"{' (MoE)' if arch.is_moe else ''}")
    if setup.checkpointing is not Checkpointing.none:
        raise ZeroplanError(f"--compile: modelled without checkpointing only, not --checkpointing {setup.checkpointing_label}")
    if setup.precision.compute_bytes != MEASURED_COMPUTE_BYTES:
        raise ZeroplanError("--compile: modelled for a 16-bit compute dtype only (measured in bf16)")
    if setup.attention is not Attention.flash:
        raise ZeroplanError("--compile: modelled with --attention flash (SDPA) only")


def compiled_terms(terms: list[tuple[str, int]], arch: Architecture, tokens: int) -> list[tuple[str, int]]:
    """One layer's eager terms as a compiled block keeps them (the module docstring's two rules)."""
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
