"""An axolotl YAML (`axolotl train FILE`): base model, adapter, DeepSpeed or FSDP, batch, length, precision.

Keys and defaults as axolotl's pydantic schema declares them (axolotl-ai-cloud/axolotl@067b021:
src/axolotl/utils/schemas/config.py, training.py, peft.py): `sequence_len` 512, `micro_batch_size` 1, `gradient_accumulation_steps` 1, `bf16` "auto",
`gradient_checkpointing` false, `optimizer` adamw_torch_fused. Docs: https://docs.axolotl.ai/docs/config-reference.html.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from zeroplan.frameworks.accelerate import fsdp_taken
from zeroplan.frameworks.axolotl_refusals import READ_RL, count, refusals
from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import (
    FileKeys,
    FrameworkRun,
    NotModelled,
    Positive,
    Taken,
    taker,
    validate_keys,
)
from zeroplan.frameworks.trainer import attention_of, ddp_by_default, optimizer_taken
from zeroplan.frameworks.tuning import LoraRegex, TrainOnly
from zeroplan.memory.setup import Checkpointing, Engine, Float8Recipe, Loss, Precision

# The deprecated boolean attention flags, as axolotl maps them onto attn_implementation.
LEGACY_ATTENTION = {"flash_attention": "flash_attention_2", "sdp_attention": "sdpa", "flex_attention": "flex_attention",
                    "xformers_attention": "xformers", "eager_attention": "eager"}  # fmt: skip


class AxolotlKeys(FileKeys):
    base_model: str | None = None
    # schemas/peft.py LoraConfig; loaders/adapter.py _build_peft_lora_config; loaders/model.py (bitsandbytes)
    adapter: str | None = None
    lora_r: Positive | None = None
    lora_alpha: int | None = None
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] | None = 0.0
    lora_target_modules: list[str] | str | None = None
    lora_target_linear: bool | None = None
    lora_modules_to_save: list[str] | None = None
    peft_use_dora: bool | None = None
    peft_use_rslora: bool | None = None
    load_in_4bit: bool | None = None
    load_in_8bit: bool | None = None
    bnb_config_kwargs: dict[str, Any] | None = None
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
    fp8_enable_fsdp_float8_all_gather: bool | None = None
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
    expert_parallel_size: int | None = None
    dp_shard_size: Positive | None = None
    reward_model: bool | None = None
    process_reward_model: bool | None = None
    rl: str | None = None
    rl_adapter_ref_model: bool = False
    tiled_mlp: bool | None = None
    plugins: list[str] | None = None
    liger_fused_linear_cross_entropy: bool | None = None  # axolotl.integrations.liger (LigerPlugin) args


# rl values read (axolotl-ai-cloud/axolotl@067b021c8b87a9e5e380b9173c704cf7340e30f5: src/axolotl/train.py
# setup_reference_model: a reference copy for every rl but orpo, none with an adapter (TRL's adapter-disabled base)
# unless rl_adapter_ref_model); ipo is DPO's loss_type ipo; kto is TRL's KTOTrainer with axolotl's mixins only
# (src/axolotl/core/trainers/trl.py AxolotlKTOTrainer). simpo (a reference loaded, then unused?) and the RL trainers
# stay refused.


def read_axolotl(data: Mapping, origin: str) -> FrameworkRun:
    """The run an axolotl YAML describes; SpecError for what it asks that zeroplan does not model."""
    keys = validate_keys(AxolotlKeys, data, origin)
    stated, refuse = keys.model_fields_set, NotModelled(origin)
    refusals(keys, data, refuse)

    take = taker(keys)

    taken = _tuning(keys, stated, refuse)
    if keys.adapter in ("lora", "qlora") and data.get("peft_autocast_adapter_dtype") is False:
        taken.append(Taken("peft_autocast_adapter_dtype", False, "adapter_dtype", "base",
                           "--adapter-dtype base (get_peft_model(..., autocast_adapter_dtype=False))"))
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
    if keys.dp_shard_size is not None:  # utils/distributed.py _get_parallel_config_kwargs: a larger world replicates it
        n = keys.dp_shard_size
        taken.append(take("dp_shard_size", "gpus", str(n), f"--gpus {n} (the shard degree; a world beyond it would "
                          "replicate the shards, hybrid sharding, which is not modelled)"))
    if keys.fp8:
        taken = _fp8(keys, taken)
    if keys.liger_fused_linear_cross_entropy and any("liger" in p.lower() for p in keys.plugins or ()):
        taken.append(take("liger_fused_linear_cross_entropy", "loss", Loss.liger, "--loss liger"))
    if keys.rl in READ_RL:  # TRL's DPOTrainer / ORPOTrainer / KTOTrainer (memory.reference)
        pt = READ_RL[keys.rl]
        taken.append(take("rl", "post_training", pt, f"--post-training {pt.value}"))
    refuse.raise_any()
    return FrameworkRun(FromKind.axolotl, origin, tuple(taken), _uncounted(keys))


def _tuning(keys: AxolotlKeys, stated: set[str], refuse: NotModelled) -> list[Taken]:
    """adapter lora / qlora (peft LoraConfig as loaders/adapter.py builds it), or unfrozen_parameters, or full."""
    if keys.adapter not in ("lora", "qlora"):
        if keys.unfrozen_parameters:
            rule = TrainOnly("unfrozen_parameters", patterns=tuple(keys.unfrozen_parameters))
            return [Taken("unfrozen_parameters", count(keys.unfrozen_parameters), "train_only", rule,
                          "only the parameters they re.match train, whole tensors (a [a:b] range zeroes part of the "
                          "gradient), the rest frozen (--freeze of the rest)")]  # fmt: skip
        return [Taken("adapter", None, None, None, "full fine-tuning: every parameter trained", True)]
    taken = [Taken("adapter", keys.adapter, None, None, "LoRA adapters (peft), the base frozen"),
             Taken("lora_r", keys.lora_r, "lora_rank", str(keys.lora_r), f"--lora-rank {keys.lora_r}")]
    written = keys.lora_target_modules
    listed = written if isinstance(written, list) else [written] if written and keys.lora_target_linear else []
    if isinstance(written, str) and not keys.lora_target_linear:  # loaders/adapter.py: LoraConfig(target_modules=str)
        taken.append(Taken("lora_target_modules", written, "lora_target_rule", LoraRegex("lora_target_modules", written),
                           "the linears whose full names it re.fullmatch-es (peft's rule for a string)"))
    if keys.lora_target_linear:
        taken.append(Taken("lora_target_linear", True, "lora_linear_names", ",".join(listed),
                           "every *Linear* module but the output head, by name (find_all_linear_names)"
                           + (", and lora_target_modules" if listed else "")))
    elif listed:
        taken.append(Taken("lora_target_modules", listed, "lora_targets", ",".join(listed), f"--lora-targets {','.join(listed)}"))
    dropout = keys.lora_dropout or 0.0
    taken.append(Taken("lora_dropout", dropout, "lora_dropout", dropout, f"--lora-dropout {dropout:g}", "lora_dropout" not in stated))
    if keys.lora_modules_to_save:
        saved = ",".join(keys.lora_modules_to_save)
        taken.append(Taken("lora_modules_to_save", keys.lora_modules_to_save, "modules_to_save", saved, f"--modules-to-save {saved}"))
    if keys.peft_use_dora:
        taken.append(Taken("peft_use_dora", True, "dora", True, "--dora"))
    taken += [Taken(key, getattr(keys, key), None, None, "a scale: no byte") for key in ("lora_alpha", "peft_use_rslora")
              if key in stated and getattr(keys, key) is not None]
    if keys.adapter == "qlora" and keys.load_in_4bit:
        taken += _four_bit(keys.bnb_config_kwargs or {}, refuse)
    elif keys.load_in_8bit:
        taken.append(Taken("load_in_8bit", True, "load_in_8bit", True, "--load-in-8bit (bitsandbytes LLM.int8 base)"))
    return taken


# loaders/model.py: adapter qlora + load_in_4bit builds BitsAndBytesConfig(bnb_4bit_quant_type "nf4",
# bnb_4bit_use_double_quant True, bnb_4bit_quant_storage bfloat16 (float32 for jamba, qwen2_moe and nemotron_h
# without DeepSpeed or FSDP), bnb_4bit_compute_dtype = torch_dtype), then applies bnb_config_kwargs over it
QLORA_DEFAULTS = {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True, "bnb_4bit_quant_storage": "bfloat16"}


def _four_bit(kwargs: Mapping, refuse: NotModelled) -> list[Taken]:
    bnb = {**QLORA_DEFAULTS, **kwargs}
    kind, double, storage = bnb["bnb_4bit_quant_type"], bnb["bnb_4bit_use_double_quant"], bnb["bnb_4bit_quant_storage"]
    if kind not in ("nf4", "fp4"):
        refuse.add("bnb_config_kwargs.bnb_4bit_quant_type", kind, "a 4-bit type other than nf4 and fp4")
    if storage not in ("uint8", "bfloat16", "float16", "float32"):
        refuse.add("bnb_config_kwargs.bnb_4bit_quant_storage", storage, "a storage dtype other than uint8, bfloat16, "
                   "float16 and float32")  # fmt: skip
    if not isinstance(double, bool):
        refuse.add("bnb_config_kwargs.bnb_4bit_use_double_quant", double, "not true or false")

    def bnb_key(name: str, option: str, value: Any, means: str) -> Taken:
        stated = name in kwargs
        return Taken(f"bnb_config_kwargs.{name}" if stated else name, bnb[name], option, value, means, not stated)

    taken = [Taken("load_in_4bit", True, "qlora", True, "--qlora (bitsandbytes 4-bit base)"),
             Taken("adapter", "qlora", "qlora_stack", "axolotl", "--qlora-stack axolotl (prepare_model_for_kbit_training, "
                   "then the norms and embeddings back to the training dtype)"),
             bnb_key("bnb_4bit_quant_type", "quant_type", kind, f"--quant-type {kind}"),
             bnb_key("bnb_4bit_use_double_quant", "double_quant", double is True,
                     "--double-quant" if double is True else "no double quantization"),
             bnb_key("bnb_4bit_quant_storage", "quant_storage", storage, f"--quant-storage {storage}")]
    if "bnb_4bit_compute_dtype" in kwargs:
        taken.append(Taken("bnb_config_kwargs.bnb_4bit_compute_dtype", kwargs["bnb_4bit_compute_dtype"], None, None,
                           "noted only: zeroplan computes in the precision's dtype"))
    return taken


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


def _fp8(keys: AxolotlKeys, taken: list[Taken]) -> list[Taken]:
    """fp8: true (axolotl-ai-cloud/axolotl@067b021 src/axolotl/core/trainers/base.py additional_accelerator_args):
    Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs(config=Float8LinearConfig(
    enable_fsdp_float8_all_gather=fp8_enable_fsdp_float8_all_gather))]): torchao's tensorwise Float8Linear on every
    linear but the model's first and last (accelerate's convert_model_to_fp8_ao), under bf16 autocast."""
    out = [t for t in taken if t.option != "precision"]
    out += [Taken("fp8", True, "precision", Precision.bf16_mixed, "--precision bf16-mixed (Accelerate's fp8 autocasts "
                  "to bf16 around the float8 matmuls)"),
            Taken("fp8", True, "float8", Float8Recipe.tensorwise, "--float8 tensorwise (torchao Float8LinearConfig(); "
                  "the first and last linear stay bf16)")]
    if keys.fp8_enable_fsdp_float8_all_gather:
        out.append(Taken("fp8_enable_fsdp_float8_all_gather", True, "float8_all_gather", True, "--float8-all-gather"))
    return out


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
