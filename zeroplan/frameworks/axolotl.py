"""An axolotl YAML (`axolotl train FILE`): base model, adapter, DeepSpeed or FSDP, batch, length, precision.

Keys and defaults as axolotl's pydantic schema declares them (axolotl-ai-cloud/axolotl@067b021:
src/axolotl/utils/schemas/config.py, training.py, peft.py): `sequence_len` 512, `micro_batch_size` 1, `gradient_accumulation_steps` 1, `bf16` "auto",
`gradient_checkpointing` false, `optimizer` adamw_torch_fused. Docs: https://docs.axolotl.ai/docs/config-reference.html.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from zeroplan.frameworks.accelerate import fsdp_taken
from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import (
    FileKeys,
    FrameworkRun,
    NotModelled,
    Positive,
    Taken,
    validate_keys,
)
from zeroplan.frameworks.trainer import attention_of, ddp_by_default, optimizer_taken
from zeroplan.memory.setup import Checkpointing, Engine, Loss, Precision

# The deprecated boolean attention flags, as axolotl maps them onto attn_implementation.
LEGACY_ATTENTION = {"flash_attention": "flash_attention_2", "sdp_attention": "sdpa", "flex_attention": "flex_attention",
                    "xformers_attention": "xformers", "eager_attention": "eager"}  # fmt: skip
DEGREES = {"context_parallel_size": "context parallelism", "sequence_parallel_degree": "sequence parallelism",
           "tensor_parallel_size": "tensor parallelism", "dp_replicate_size": "hybrid sharding (replicated shards)"}


class AxolotlKeys(FileKeys):
    base_model: str | None = None
    adapter: str | None = None
    lora_r: int | None = None
    lora_target_modules: list[str] | str | None = None
    lora_target_linear: bool | None = None
    load_in_4bit: bool | None = None
    load_in_8bit: bool | None = None
    unfrozen_parameters: list[str] | None = None
    deepspeed: str | dict[str, Any] | None = None
    fsdp: list[str] | None = None
    fsdp_config: dict[str, Any] | None = None
    fsdp_version: Literal[1, 2] | None = None
    micro_batch_size: Positive = 1
    gradient_accumulation_steps: Positive = 1
    sequence_len: Positive = 512
    bf16: Literal["auto", "full"] | bool | None = "auto"
    fp16: bool | None = None
    fp8: bool | None = None
    bfloat16: bool | None = None
    float16: bool | None = None
    gradient_checkpointing: Literal["offload", "offload_disk"] | bool | None = False
    activation_offloading: Literal["legacy", "disk", "hidden_states"] | bool | None = False
    attn_implementation: str | None = None
    flash_attention: bool | None = None
    sdp_attention: bool | None = None
    flex_attention: bool | None = None
    xformers_attention: bool | None = None
    eager_attention: bool | None = None
    optimizer: str = "adamw_torch_fused"
    context_parallel_size: int | None = None
    sequence_parallel_degree: int | None = None
    tensor_parallel_size: int | None = None
    dp_replicate_size: int | None = None
    reward_model: bool | None = None
    process_reward_model: bool | None = None
    rl: str | None = None
    tiled_mlp: bool | None = None
    plugins: list[str] | None = None
    liger_fused_linear_cross_entropy: bool | None = None  # axolotl.integrations.liger (LigerPlugin) args


def read_axolotl(data: Mapping, origin: str) -> FrameworkRun:
    """The run an axolotl YAML describes; SpecError for what it asks that zeroplan does not model."""
    keys = validate_keys(AxolotlKeys, data, origin)
    stated, refuse = keys.model_fields_set, NotModelled(origin)
    _refusals(keys, refuse)

    def take(key: str, option: str | None, value: Any, means: str) -> Taken:
        return Taken(key, getattr(keys, key), option, value, means, key not in stated)

    taken = []
    if keys.base_model is not None:
        taken.append(take("base_model", "model", keys.base_model, f"--model {keys.base_model}"))
    micro, gas, length = keys.micro_batch_size, keys.gradient_accumulation_steps, keys.sequence_len
    taken += [take("micro_batch_size", "micro_batch", str(micro), f"--micro-batch {micro}"),
              take("gradient_accumulation_steps", "grad_accum", str(gas), f"--grad-accum {gas}"),
              take("sequence_len", "seq_len", str(length), f"--seq-len {length}")]  # fmt: skip
    taken += [_precision(keys, stated), _attention(keys, stated), _checkpointing(keys, stated)]
    if (optimizer := optimizer_taken("optimizer", keys.optimizer, "optimizer" not in stated, refuse)) is not None:
        taken.append(optimizer)
    taken += _engine(keys, origin, refuse)
    if keys.liger_fused_linear_cross_entropy and any("liger" in p.lower() for p in keys.plugins or ()):
        taken.append(take("liger_fused_linear_cross_entropy", "loss", Loss.liger, "--loss liger"))
    refuse.raise_any()
    return FrameworkRun(FromKind.axolotl, origin, tuple(taken), _uncounted(keys))


def _refusals(keys: AxolotlKeys, refuse: NotModelled) -> None:
    if keys.adapter:
        rank = f"lora_r {keys.lora_r}; " if keys.lora_r is not None else ""
        refuse.add("adapter", keys.adapter, f"{'QLoRA' if keys.adapter == 'qlora' else 'an adapter'}; {rank}not read from "
                   "the file yet: estimate the run without --from, with --lora-rank, --lora-targets, --qlora (docs/finetune.md)")  # fmt: skip
    for key in ("load_in_4bit", "load_in_8bit"):
        if getattr(keys, key):
            refuse.add(key, True, "a quantized base model")
    if keys.unfrozen_parameters:
        count = len(keys.unfrozen_parameters)
        refuse.add("unfrozen_parameters", f"{count} pattern{'s' * (count != 1)}", "freeze: only the parameters they match trained")
    for key, what in DEGREES.items():
        if (value := getattr(keys, key)) is not None and value > 1:
            refuse.add(key, value, what)
    for key in ("reward_model", "process_reward_model"):
        if getattr(keys, key):
            refuse.add(key, True, "a reward model: a score head in place of the language-model head")
    if keys.rl:
        refuse.add("rl", keys.rl, "preference or RL training (reference model, generation)")
    if keys.fp8:
        refuse.add("fp8", True, "FP8 training")
    if keys.float16:
        refuse.add("float16", True, "pure fp16 training")


def _precision(keys: AxolotlKeys, stated: set[str]) -> Taken:
    """bfloat16: pure bf16; bf16 true/auto/full: bf16 mixed (auto: where the GPU has bf16); fp16: fp16 mixed."""
    if keys.bfloat16:
        return Taken("bfloat16", True, "precision", Precision.bf16_true, "--precision bf16-true")
    if keys.fp16 and keys.bf16 is not True:
        return Taken("fp16", True, "precision", Precision.fp16_mixed, "--precision fp16-mixed")
    if keys.bf16 is False or keys.bf16 is None:
        return Taken("bf16", keys.bf16, "precision", Precision.fp32, "--precision fp32 (neither bf16 nor fp16)")
    means = "--precision bf16-mixed" + (" (auto: assuming the GPU has bf16)" if keys.bf16 == "auto" else "")
    return Taken("bf16", keys.bf16, "precision", Precision.bf16_mixed, means, "bf16" not in stated)


def _attention(keys: AxolotlKeys, stated: set[str]) -> Taken:
    if keys.attn_implementation is not None:
        attention = attention_of(keys.attn_implementation)
        return Taken("attn_implementation", keys.attn_implementation, "attention", attention, f"--attention {attention.value}")
    for flag, implementation in LEGACY_ATTENTION.items():
        if getattr(keys, flag):
            attention = attention_of(implementation)
            return Taken(flag, True, "attention", attention, f"--attention {attention.value}")
    return Taken("attn_implementation", None, "attention", attention_of("sdpa"), "--attention flash (transformers' sdpa)", True)


def _checkpointing(keys: AxolotlKeys, stated: set[str]) -> Taken:
    value = keys.gradient_checkpointing
    checkpointing = Checkpointing.full if value else Checkpointing.none
    return Taken("gradient_checkpointing", value, "checkpointing", checkpointing, f"--checkpointing {checkpointing.value}",
                 "gradient_checkpointing" not in stated)  # fmt: skip


def _engine(keys: AxolotlKeys, origin: str, refuse: NotModelled) -> list[Taken]:
    if isinstance(keys.deepspeed, str):
        return [Taken("deepspeed", keys.deepspeed, "engine", Engine.deepspeed, "--engine deepspeed"),
                Taken("deepspeed", keys.deepspeed, "deepspeed_config", keys.deepspeed, "--deepspeed-config")]
    if isinstance(keys.deepspeed, dict):
        return [Taken("deepspeed", "(inline)", "engine", Engine.deepspeed, "--engine deepspeed"),
                Taken("deepspeed", "(inline)", "deepspeed_config", keys.deepspeed, "an inline DeepSpeed config")]
    if keys.fsdp_config is not None:
        return fsdp_taken(keys.fsdp_config, "fsdp_config", origin, refuse, keys.fsdp_version)
    if keys.fsdp:
        refuse.add("fsdp", keys.fsdp, "the deprecated fsdp list; write fsdp_config")
        return []
    return ddp_by_default("deepspeed")


def _uncounted(keys: AxolotlKeys) -> tuple[str, ...]:
    """Memory savings the file asks for that zeroplan does not count: the estimate is an upper bound for them."""
    notes = []
    if keys.gradient_checkpointing in ("offload", "offload_disk"):
        notes.append(f"gradient_checkpointing: {keys.gradient_checkpointing} (checkpoints offloaded)")
    if keys.activation_offloading:
        notes.append(f"activation_offloading: {keys.activation_offloading}")
    if keys.tiled_mlp:
        notes.append("tiled_mlp: true")
    notes += [f"plugins: {p}" for p in keys.plugins or () if "cut_cross_entropy" in p or "liger" in p]
    return tuple(notes)
