"""The Hugging Face Trainer words that LLaMA-Factory and axolotl both write: optimizer names and attention.

Optimizer names are transformers' `OptimizerNames` (src/transformers/training_args.py) and axolotl's own; each maps to the
zeroplan optimizer with the same state bytes, or is not modelled. Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.frameworks.run import NotModelled, Taken
from zeroplan.memory.setup import Attention, Engine, Optimizer

OPTIMIZERS = {
    **dict.fromkeys(("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused", "adamw_torch_xla",
                     "adamw_torch_npu_fused", "adamw_anyprecision", "adamw"), Optimizer.adamw),  # fmt: skip
    # bitsandbytes' blockwise 8-bit AdamW (Dettmers et al. 2021), and torchao's 8-bit AdamW
    **dict.fromkeys(("adamw_bnb_8bit", "adamw_8bit", "adamw_torch_8bit"), Optimizer.adamw_8bit),
    # bitsandbytes' paged AdamW (states in CUDA unified memory, zeroplan.memory.paged)
    **dict.fromkeys(("paged_adamw_32bit", "paged_adamw"), Optimizer.paged_adamw),
    "paged_adamw_8bit": Optimizer.paged_adamw_8bit,
    "sgd": Optimizer.sgd,
    "adafactor": Optimizer.adafactor,
    "lion_32bit": Optimizer.lion,
}


def optimizer_taken(key: str, name: str, default: bool, refuse: NotModelled) -> Taken | None:
    """The zeroplan optimizer for an optimizer name; None (and a refusal) for one it does not model."""
    optimizer = OPTIMIZERS.get(name)
    if optimizer is None:
        refuse.add(key, name, "an optimizer; zeroplan models AdamW (adamw_torch, adamw_torch_fused, ...), 8-bit AdamW "
                   "(adamw_bnb_8bit, adamw_8bit, adamw_torch_8bit), paged_adamw_32bit, paged_adamw_8bit, sgd, "
                   "adafactor and lion_32bit")  # fmt: skip
        return None
    return Taken(key, name, "optimizer", optimizer, f"--optimizer {optimizer.value}", default)


def attention_of(implementation: str) -> Attention:
    """eager keeps the score matrices; every other implementation (sdpa, flash, flex, xformers, kernels) does not."""
    return Attention.eager if implementation in ("eager", "disabled") else Attention.flash


def ddp_by_default(key: str) -> list[Taken]:
    """No DeepSpeed (or FSDP) config: the Trainer wraps the model in DDP when launched on several GPUs."""
    means = "--engine ddp (no DeepSpeed or FSDP config: the Trainer's DDP)"
    return [Taken(key, None, "engine", Engine.ddp, means, True), Taken(key, None, "stage", 0, "stage 0 (DDP)", True)]
