"""A TRL / transformers TrainingArguments YAML (`trl sft --config FILE`, the alignment-handbook's recipes).

Keys and defaults as TRL declares them (huggingface/trl@f2cd577: trl/trainer/model_config.py `ModelConfig`,
trl/trainer/base_config.py `_BaseConfig`, sft_config.py `SFTConfig`; transformers' `TrainingArguments` for the
batch, precision, `optim`, `deepspeed` and `fsdp`): TRL's configs default `gradient_checkpointing` to true and `bf16` to
true unless `fp16`; `max_length` 1024; `ModelConfig.dtype` float32 (`torch_dtype` is its older name); LoRA with
`use_peft` (`lora_r` 16, `lora_dropout` 0.05, `lora_target_modules`: peft's per-architecture default when unset).
The file names no trainer: SFT is read, or the preference or distillation trainer its own keys name
(frameworks/trl_posttrain.py: DPO, CPO/SimPO, KTO, GKD); an RL trainer's keys (`num_generations`...) are refused in
one line. Docs: https://huggingface.co/docs/trl/clis. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import FileKeys, FrameworkRun, NotModelled, Positive, Taken, taker, validate_keys
from zeroplan.frameworks.trainer import attention_of, ddp_by_default, optimizer_taken, trainer_fsdp
from zeroplan.frameworks.trl_posttrain import post_training_of
from zeroplan.memory.setup import Checkpointing, Engine, Loss, Precision

TRL_MAX_LENGTH = 1024  # SFTConfig.max_length / DPOConfig.max_length default
TRL_LORA_R, TRL_LORA_DROPOUT = 16, 0.05  # ModelConfig.lora_r, lora_dropout defaults
PEFT_DEFAULT_TARGETS = "q_proj,v_proj"  # peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for llama/mistral/qwen2
LOAD_DTYPES = {"bfloat16": Precision.bf16_true, "float16": None, "float32": None, "auto": Precision.bf16_true}
RL_KEYS = ("num_generations", "reward_funcs", "use_vllm", "reward_model_path", "sft_model_path", "max_completion_length")


class TrlKeys(FileKeys):
    model_name_or_path: str | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] | None = "float32"
    torch_dtype: Literal["auto", "bfloat16", "float16", "float32"] | None = None
    attn_implementation: str | None = None
    use_peft: bool = False
    lora_r: Positive = TRL_LORA_R
    lora_alpha: int | None = None
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] = TRL_LORA_DROPOUT
    lora_target_modules: list[str] | str | None = None
    lora_target_parameters: list[str] | str | None = None
    lora_modules_to_save: list[str] | None = None
    use_rslora: bool = False
    use_dora: bool = False
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    bnb_4bit_quant_type: Literal["nf4", "fp4"] = "nf4"
    use_bnb_nested_quant: bool = False
    bnb_4bit_quant_storage: str | None = None
    per_device_train_batch_size: Positive = 8
    gradient_accumulation_steps: Positive = 1
    max_length: Positive | None = TRL_MAX_LENGTH
    max_seq_length: Positive | None = None
    gradient_checkpointing: bool = True
    bf16: bool | None = None
    fp16: bool = False
    optim: str = "adamw_torch_fused"
    deepspeed: str | dict[str, Any] | None = None
    fsdp: str | list[str] | None = None
    fsdp_config: dict[str, Any] | str | None = None
    use_liger_kernel: bool = False
    torch_compile: bool = False


def read_trl(data: Mapping, origin: str) -> FrameworkRun:
    """The SFT run a TRL config describes; SpecError for what it asks that zeroplan does not model."""
    keys = validate_keys(TrlKeys, data, origin)
    stated, refuse = keys.model_fields_set, NotModelled(origin)
    _refusals(keys, data, refuse)

    take = taker(keys)

    taken = _tuning(keys, stated, take)
    if (post := post_training_of(data, refuse)) and keys.use_liger_kernel:
        refuse.add("use_liger_kernel", True, "beside a preference or distillation trainer: Liger's fused loss "
                   "(dpo_trainer.py _compute_loss_liger) never makes the logits")  # fmt: skip
    taken += post
    if keys.model_name_or_path is not None:
        taken.append(take("model_name_or_path", "model", keys.model_name_or_path, f"--model {keys.model_name_or_path}"))
    micro, gas = keys.per_device_train_batch_size, keys.gradient_accumulation_steps
    taken += [take("per_device_train_batch_size", "micro_batch", str(micro), f"--micro-batch {micro}"),
              take("gradient_accumulation_steps", "grad_accum", str(gas), f"--grad-accum {gas}"), _length(keys, stated)]
    engine = trainer_fsdp(keys.fsdp, keys.fsdp_config, origin, refuse) if keys.fsdp else []
    if isinstance(keys.deepspeed, (str, dict)):
        shown = keys.deepspeed if isinstance(keys.deepspeed, str) else "(inline)"
        engine = [Taken("deepspeed", shown, "engine", Engine.deepspeed, "--engine deepspeed"),
                  Taken("deepspeed", shown, "deepspeed_config", keys.deepspeed, "--deepspeed-config")]
    taken += engine or ddp_by_default("deepspeed")
    taken.append(_precision(keys, stated, sharded=bool(engine)))
    if keys.attn_implementation is not None:
        attention = attention_of(keys.attn_implementation)
        taken.append(take("attn_implementation", "attention", attention, f"--attention {attention.value}"))
    checkpointing = Checkpointing.full if keys.gradient_checkpointing else Checkpointing.none
    taken.append(Taken("gradient_checkpointing", keys.gradient_checkpointing, "checkpointing", checkpointing,
                       f"--checkpointing {checkpointing.value}", "gradient_checkpointing" not in stated))
    if (optimizer := optimizer_taken("optim", keys.optim, "optim" not in stated, refuse)) is not None:
        taken.append(optimizer)
    if keys.use_liger_kernel:  # transformers' _apply_liger_kernel_to_instance: fused linear cross-entropy by default
        taken.append(take("use_liger_kernel", "loss", Loss.liger, "--loss liger"))
    refuse.raise_any()
    uncounted = ("use_liger_kernel: true (Liger's RMSNorm, RoPE and SwiGLU kernels)",) if keys.use_liger_kernel else ()
    return FrameworkRun(FromKind.trl, origin, tuple(taken), uncounted, asks=tuple(refuse.asks))


def _refusals(keys: TrlKeys, data: Mapping, refuse: NotModelled) -> None:
    for key in RL_KEYS:
        if key in data:
            refuse.add(key, data[key] if isinstance(data[key], (str, int, bool)) else "(set)",
                       "an RL trainer's key (GRPO, RLOO, PPO): generation and reward or value models")  # fmt: skip
            break
    if keys.load_in_4bit and keys.load_in_8bit:
        refuse.add("load_in_4bit", True, "beside load_in_8bit (TRL refuses both)")
    if (keys.load_in_4bit or keys.load_in_8bit) and not keys.use_peft:
        refuse.add("load_in_4bit" if keys.load_in_4bit else "load_in_8bit", True, "a quantized base without use_peft")
    if keys.use_peft and keys.lora_target_parameters:
        refuse.add("lora_target_parameters", "(set)", "LoRA on expert parameters (peft target_parameters)")
    if keys.use_peft and isinstance(keys.lora_target_modules, str) and keys.lora_target_modules != "all-linear":
        refuse.add("lora_target_modules", keys.lora_target_modules, "a string, which peft matches as a regex; list the names")
    dtype = keys.torch_dtype or keys.dtype
    if dtype == "float16" and not (keys.deepspeed or keys.fsdp):
        refuse.add("torch_dtype" if keys.torch_dtype else "dtype", dtype, "fp16 parameters trained without fp32 masters")
    if keys.torch_compile:
        refuse.add("torch_compile", True, "torch.compile's activation memory")


def _tuning(keys: TrlKeys, stated: set[str], take) -> list[Taken]:
    """use_peft: trl.get_peft_config's LoraConfig (r, target_modules, lora_dropout, modules_to_save, use_dora);
    load_in_4bit / 8bit: trl.get_quantization_config's BitsAndBytesConfig."""
    if not keys.use_peft:
        return [Taken("use_peft", False, None, None, "full fine-tuning: every parameter trained", "use_peft" not in stated)]
    taken = [take("use_peft", None, None, "LoRA adapters (peft), the base frozen"),
             take("lora_r", "lora_rank", str(keys.lora_r), f"--lora-rank {keys.lora_r}")]
    targets = keys.lora_target_modules
    if targets == "all-linear" or targets == ["all-linear"]:
        taken.append(take("lora_target_modules", "lora_targets", "all-linear", "--lora-targets all-linear"))
    elif targets:
        listed = ",".join(targets if isinstance(targets, list) else [targets])
        taken.append(take("lora_target_modules", "lora_targets", listed, f"--lora-targets {listed}"))
    else:
        taken.append(Taken("lora_target_modules", None, "lora_targets", PEFT_DEFAULT_TARGETS,
                           f"--lora-targets {PEFT_DEFAULT_TARGETS} (peft's default for Llama, Mistral and Qwen)", True))
    taken.append(take("lora_dropout", "lora_dropout", keys.lora_dropout, f"--lora-dropout {keys.lora_dropout:g}"))
    if keys.lora_modules_to_save:
        saved = ",".join(keys.lora_modules_to_save)
        taken.append(take("lora_modules_to_save", "modules_to_save", saved, f"--modules-to-save {saved}"))
    if keys.use_dora:
        taken.append(take("use_dora", "dora", True, "--dora"))
    taken += [take(key, None, None, "a scale: no byte") for key in ("lora_alpha", "use_rslora") if key in stated]
    if keys.load_in_4bit:
        storage = keys.bnb_4bit_quant_storage or "uint8"
        taken += [take("load_in_4bit", "qlora", True, "--qlora (bitsandbytes 4-bit base)"),
                  take("bnb_4bit_quant_type", "quant_type", keys.bnb_4bit_quant_type, f"--quant-type {keys.bnb_4bit_quant_type}"),
                  take("use_bnb_nested_quant", "double_quant", keys.use_bnb_nested_quant,
                       "--double-quant" if keys.use_bnb_nested_quant else "no double quantization"),
                  take("bnb_4bit_quant_storage", "quant_storage", storage, f"--quant-storage {storage}")]
    elif keys.load_in_8bit:
        taken.append(take("load_in_8bit", "load_in_8bit", True, "--load-in-8bit (bitsandbytes LLM.int8 base)"))
    return taken


def _length(keys: TrlKeys, stated: set[str]) -> Taken:
    """max_length (max_seq_length in TRL before 0.20); null: no truncation, the dataset's longest sequence."""
    key = "max_seq_length" if "max_seq_length" in stated and "max_length" not in stated else "max_length"
    length = getattr(keys, key) or (TRL_MAX_LENGTH if keys.max_length is None and "max_length" not in stated else None)
    if length is None:
        return Taken(key, None, None, None, "no truncation: the length is the dataset's longest sequence; give --seq-len")
    return Taken(key, length, "seq_len", str(length), f"--seq-len {length} (the longest sequence)", key not in stated)


def _precision(keys: TrlKeys, stated: set[str], sharded: bool) -> Taken:
    """bf16 / fp16 autocast over the parameters as loaded (ModelConfig.dtype): float32 parameters are bf16-mixed; bf16
    parameters (dtype bfloat16 or auto) train in bf16 themselves, their optimizer states too: bf16-true, unless
    DeepSpeed or FSDP holds fp32 masters of them (bf16-mixed)."""
    dtype_key = "torch_dtype" if "torch_dtype" in stated else "dtype"
    dtype = getattr(keys, dtype_key) or "float32"
    loaded = LOAD_DTYPES[dtype]
    bf16 = keys.bf16 if keys.bf16 is not None else not keys.fp16
    if loaded is Precision.bf16_true and not sharded:
        means = f"--precision bf16-true (parameters loaded in {'the checkpoint dtype, bf16 assumed' if dtype == 'auto' else 'bf16'}: they, their gradients and AdamW states stay bf16)"
        return Taken(dtype_key, dtype, "precision", Precision.bf16_true, means, dtype_key not in stated)
    if bf16:
        return Taken("bf16", True, "precision", Precision.bf16_mixed, "--precision bf16-mixed", "bf16" not in stated)
    if keys.fp16:
        return Taken("fp16", True, "precision", Precision.fp16_mixed, "--precision fp16-mixed")
    return Taken("bf16", False, "precision", Precision.fp32, "--precision fp32 (neither bf16 nor fp16)")
