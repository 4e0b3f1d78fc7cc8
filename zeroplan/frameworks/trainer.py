"""The Hugging Face Trainer words that LLaMA-Factory and axolotl both write: optimizer names and attention.

Optimizer names are transformers' `OptimizerNames` (src/transformers/training_args.py) and axolotl's own; each maps to the
zeroplan optimizer with the same state bytes, or is not modelled. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

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


# TrainingArguments.fsdp: space-separated FSDPOption words (transformers' trainer_utils.FSDPOption)
FSDP_WORDS = {"full_shard": "FULL_SHARD", "shard_grad_op": "SHARD_GRAD_OP", "no_shard": "NO_SHARD",
              "hybrid_shard": "HYBRID_SHARD", "hybrid_shard_zero2": "_HYBRID_SHARD_ZERO2"}  # fmt: skip


def trainer_fsdp(fsdp: str | list[str], config: Mapping | str | None, origin: str, refuse: NotModelled) -> list[Taken]:
    """TrainingArguments' `fsdp` words and `fsdp_config` (a mapping; a path to a JSON file is refused) as the
    FSDP plugin transformers builds from them: the sharding strategy a word names, `offload` for CPU offload."""
    from zeroplan.frameworks.accelerate import fsdp_taken

    words = fsdp.split() if isinstance(fsdp, str) else list(fsdp)
    if isinstance(config, str):
        refuse.add("fsdp_config", config, "an FSDP config in a separate JSON file; write it inline")
        return []
    section = {k: v for k, v in (config or {}).items() if k.removeprefix("fsdp_") in FSDP_SECTION_KEYS}
    strategy = next((FSDP_WORDS[w] for w in words if w in FSDP_WORDS), None)
    if strategy is not None and "version" not in {k.removeprefix("fsdp_") for k in section}:
        section["fsdp_sharding_strategy"] = strategy
    elif strategy is not None and "reshard_after_forward" not in {k.removeprefix("fsdp_") for k in section}:
        section["fsdp_reshard_after_forward"] = strategy != "SHARD_GRAD_OP"
    if "offload" in words:
        section["fsdp_offload_params"] = True
    return [Taken("fsdp", " ".join(words), None, None, "FSDP (TrainingArguments.fsdp)"),
            *fsdp_taken(section, "fsdp_config", origin, refuse)]


FSDP_SECTION_KEYS = ("version", "sharding_strategy", "reshard_after_forward", "offload_params", "activation_checkpointing")
