"""An ms-swift YAML (`swift sft --config FILE`): model, tuner, DeepSpeed preset, batch, length, precision.

Keys and defaults as ms-swift declares them (modelscope/ms-swift@3602360: swift/arguments/base_args/base_args.py
`tuner_type` lora; tuner_args.py `lora_rank` 8, `lora_dropout` 0.05, `target_modules` ['all-linear'];
template_args.py `max_length` None, the model's own limit; quant_args.py `quant_method` / `quant_bits`;
swift/trainers/arguments.py `per_device_train_batch_size` 1, `gradient_checkpointing` true,
`gradient_accumulation_steps` None: ceil(16 / batch / world size); sft_args.py `_init_deepspeed`: `zero0`..`zero3`,
`zero2_offload`, `zero3_offload` name swift/config/*.json, a ZeRO stage with batch and precision "auto").
`rlhf_type` (swift/arguments/rlhf_args.py): dpo, kto, orpo, simpo and cpo are read as --post-training (ms-swift's
trainers subclass TRL's, swift/rlhf_trainers/*_trainer.py; TRL's step is what zeroplan counts), with the reference a
frozen copy of the model under full tuning (`ref_model = ref_model or model`); gkd, grpo, ppo, rm and a `ref_model`
or `ref_adapters` of its own are refused in one line, as is the Megatron backend (`megatron sft`:
`micro_batch_size`, `global_batch_size`, `tensor_model_parallel_size`). Docs: https://swift.readthedocs.io/.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import FileKeys, FrameworkRun, NotModelled, Positive, Taken, taker, validate_keys
from zeroplan.frameworks.trainer import attention_of, ddp_by_default, optimizer_taken
from zeroplan.memory.setup import Checkpointing, Engine, PostTraining, Precision

SWIFT_LORA_RANK, SWIFT_LORA_DROPOUT = 8, 0.05  # tuner_args.py
# sft_args.py _init_deepspeed: the preset names, each swift/config/NAME.json (stage; the _offload ones offload
# the optimizer, and ZeRO-3's the parameters too, to the CPU)
DEEPSPEED_PRESETS = {"zero0": (0, "none", "none"), "zero1": (1, "none", "none"), "zero2": (2, "none", "none"),
                     "zero3": (3, "none", "none"), "zero2_offload": (2, "cpu", "none"), "zero3_offload": (3, "cpu", "cpu")}
MEGATRON_KEYS = ("micro_batch_size", "global_batch_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                 "expert_model_parallel_size", "recompute_granularity")  # fmt: skip
# rlhf_type -> the post-training zeroplan counts (TRL's step: huggingface/trl@f2cd577, memory.reference); cpo is
# CPOTrainer, pairs without a reference, as simpo (CPOTrainer with loss_type simpo)
RLHF_TYPES = {"dpo": PostTraining.dpo, "kto": PostTraining.kto, "orpo": PostTraining.orpo, "simpo": PostTraining.simpo,
              "cpo": PostTraining.simpo}  # fmt: skip
RLHF_REFUSED = {"gkd": "ms-swift's GKDTrainer (its own teacher loading, top-k logits, on-policy rollouts by default)",
                "grpo": "GRPO (generation, reward functions)", "ppo": "PPO (reward and value models, generation)",
                "rm": "reward-model training (a value head)"}  # fmt: skip
LOADED = {"bfloat16": Precision.bf16_true, "bf16": Precision.bf16_true, "float32": Precision.fp32, "fp32": Precision.fp32}


class SwiftKeys(FileKeys):
    model: str | None = None
    model_type: str | None = None
    torch_dtype: str | None = None
    tuner_type: str | None = None
    train_type: str | None = None  # tuner_type's name before ms-swift 4
    lora_rank: Positive = SWIFT_LORA_RANK
    lora_alpha: int | None = None
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] = SWIFT_LORA_DROPOUT
    target_modules: list[str] | str = ["all-linear"]
    modules_to_save: list[str] = []
    use_dora: bool = False
    quant_method: Literal["bnb", "hqq", "eetq", "quanto", "fp8"] | None = None
    quant_bits: int | str | None = None
    bnb_4bit_quant_type: Literal["nf4", "fp4"] = "nf4"
    bnb_4bit_use_double_quant: bool = True
    per_device_train_batch_size: Positive = 1
    gradient_accumulation_steps: Positive | None = None
    max_length: Positive | None = None
    gradient_checkpointing: bool = True
    deepspeed: str | dict[str, Any] | None = None
    fsdp: str | None = None
    attn_impl: str | None = None
    optim: str = "adamw_torch"
    rlhf_type: str | None = None
    ref_model: str | None = None
    ref_adapters: list[str] | str | None = None
    device_groups: dict[str, Any] | None = None  # use_ray: nproc_per_node (examples/train/multi-node/ray/sft.yaml)


def read_swift(data: Mapping, origin: str) -> FrameworkRun:
    keys = validate_keys(SwiftKeys, data, origin)
    stated, refuse = keys.model_fields_set, NotModelled(origin)
    tuner = keys.tuner_type or keys.train_type or "lora"
    tuner_key = "tuner_type" if keys.tuner_type else "train_type"
    if keys.rlhf_type is not None and keys.rlhf_type not in RLHF_TYPES:
        said = RLHF_REFUSED.get(keys.rlhf_type, "an RLHF trainer ms-swift does not name")
        refuse.add("rlhf_type", keys.rlhf_type, said)
    for key in ("ref_model", "ref_adapters"):
        if getattr(keys, key):
            refuse.add(key, getattr(keys, key), "a reference model other than the policy's own base")
    if keys.rlhf_type in RLHF_TYPES and data.get("precompute_ref_log_probs") is True:  # TRL's config field, passed on
        refuse.add("precompute_ref_log_probs", True, "the reference log-probs computed before training (no reference "
                   "forward in the step)")  # fmt: skip
    if (megatron := [k for k in MEGATRON_KEYS if k in data]):
        refuse.add(megatron[0], data[megatron[0]], "ms-swift's Megatron backend (megatron sft): estimate it with "
                   "--method megatron and its --tp/--pp/--ep")  # fmt: skip
    if tuner not in ("lora", "full"):
        refuse.add(tuner_key, tuner, "a tuner other than lora and full")
    if keys.fsdp:
        refuse.add("fsdp", keys.fsdp, "ms-swift's FSDP2 presets")

    take = taker(keys)

    taken = _tuning(keys, tuner, tuner_key, stated, take, refuse)
    if (pt := RLHF_TYPES.get(keys.rlhf_type or "")) is not None:
        taken.append(take("rlhf_type", "post_training", pt, f"--post-training {pt.value} (ms-swift's trainer subclasses "
                          "TRL's; TRL's step counted)"))
    if keys.model is not None:
        taken.append(take("model", "model", keys.model, f"--model {keys.model}"))
    nproc = (keys.device_groups or {}).get("nproc_per_node")
    if isinstance(nproc, int) and nproc > 0:
        taken.append(Taken("device_groups.nproc_per_node", nproc, "gpus", str(nproc), f"--gpus {nproc} (ms-swift's Ray "
                           "device group)"))
    micro = keys.per_device_train_batch_size
    taken.append(take("per_device_train_batch_size", "micro_batch", str(micro), f"--micro-batch {micro}"))
    if keys.gradient_accumulation_steps is not None:
        gas = keys.gradient_accumulation_steps
        taken.append(take("gradient_accumulation_steps", "grad_accum", str(gas), f"--grad-accum {gas}"))
    length = keys.max_length
    taken.append(Taken("max_length", length, "seq_len", None if length is None else str(length),
                       f"--seq-len {length}" if length else "not set: ms-swift truncates at the model's own "
                       "max_model_len; give --seq-len", length is None))  # fmt: skip
    engine = _deepspeed(keys, refuse)
    taken += engine or ddp_by_default("deepspeed")
    taken.append(_precision(keys, stated, sharded=bool(engine), refuse=refuse))
    if keys.attn_impl is not None:
        attention = attention_of(keys.attn_impl)
        taken.append(take("attn_impl", "attention", attention, f"--attention {attention.value}"))
    checkpointing = Checkpointing.full if keys.gradient_checkpointing else Checkpointing.none
    taken.append(take("gradient_checkpointing", "checkpointing", checkpointing, f"--checkpointing {checkpointing.value}"))
    if (optimizer := optimizer_taken("optim", keys.optim, "optim" not in stated, refuse)) is not None:
        taken.append(optimizer)
    refuse.raise_any()
    return FrameworkRun(FromKind.swift, origin, tuple(taken))


def _tuning(keys: SwiftKeys, tuner: str, tuner_key: str, stated: set[str], take, refuse: NotModelled) -> list[Taken]:
    if tuner != "lora":
        return [Taken(tuner_key, tuner, None, None, "full fine-tuning: every parameter trained")]
    taken = [Taken(tuner_key, tuner, None, None, "LoRA adapters (peft), the base frozen", tuner_key not in stated),
             take("lora_rank", "lora_rank", str(keys.lora_rank), f"--lora-rank {keys.lora_rank}")]
    targets = [keys.target_modules] if isinstance(keys.target_modules, str) else keys.target_modules
    if targets == ["all-linear"]:
        taken.append(take("target_modules", "lora_targets", "all-linear", "--lora-targets all-linear"))
    elif any(t in ("all-linear", "all-embedding", "all-norm") for t in targets):
        refuse.add("target_modules", targets, "ms-swift's all-linear beside names, or all-embedding / all-norm")
    else:
        taken.append(take("target_modules", "lora_targets", ",".join(targets), f"--lora-targets {','.join(targets)}"))
    taken.append(take("lora_dropout", "lora_dropout", keys.lora_dropout, f"--lora-dropout {keys.lora_dropout:g}"))
    if keys.modules_to_save:
        taken.append(take("modules_to_save", "modules_to_save", ",".join(keys.modules_to_save), "--modules-to-save"))
    if keys.use_dora:
        taken.append(take("use_dora", "dora", True, "--dora"))
    if "lora_alpha" in stated:
        taken.append(take("lora_alpha", None, None, "a scale: no byte"))
    if keys.quant_method is None and keys.quant_bits is None:
        return taken
    if keys.quant_method != "bnb" or keys.quant_bits not in (4, 8):
        refuse.add("quant_method", keys.quant_method, f"quant_bits {keys.quant_bits}: zeroplan reads bitsandbytes 4 and 8 bits")
    elif keys.quant_bits == 4:
        taken += [take("quant_bits", "qlora", True, "--qlora (bitsandbytes 4-bit base)"),
                  take("bnb_4bit_quant_type", "quant_type", keys.bnb_4bit_quant_type, f"--quant-type {keys.bnb_4bit_quant_type}"),
                  take("bnb_4bit_use_double_quant", "double_quant", keys.bnb_4bit_use_double_quant, "--double-quant")]
    else:
        taken.append(take("quant_bits", "load_in_8bit", True, "--load-in-8bit (bitsandbytes LLM.int8 base)"))
    return taken


def _deepspeed(keys: SwiftKeys, refuse: NotModelled) -> list[Taken]:
    written = keys.deepspeed
    if written is None:
        return []
    if isinstance(written, str) and written in DEEPSPEED_PRESETS:
        stage, optimizer, param = DEEPSPEED_PRESETS[written]
        block = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                 "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
                 "zero_optimization": {"stage": stage, "offload_optimizer": {"device": optimizer},
                                       "offload_param": {"device": param}}}  # fmt: skip
        return [Taken("deepspeed", written, "engine", Engine.deepspeed, "--engine deepspeed"),
                Taken("deepspeed", written, "deepspeed_config", block, f"ms-swift's swift/config/{written}.json: ZeRO-{stage}"
                      + (f", optimizer offloaded to the CPU" if optimizer == "cpu" else "")
                      + (", parameters too" if param == "cpu" else ""))]  # fmt: skip
    shown = written if isinstance(written, str) else "(inline)"
    return [Taken("deepspeed", shown, "engine", Engine.deepspeed, "--engine deepspeed"),
            Taken("deepspeed", shown, "deepspeed_config", written, "--deepspeed-config")]


def _precision(keys: SwiftKeys, stated: set[str], sharded: bool, refuse: NotModelled) -> Taken:
    """ms-swift sets bf16/fp16 from torch_dtype and loads the model in it: bf16 parameters train as bf16 (bf16-true)
    unless DeepSpeed keeps fp32 masters of them (bf16-mixed); None is the checkpoint's dtype, bf16 assumed."""
    dtype = keys.torch_dtype or "bfloat16"
    loaded = LOADED.get(dtype)
    if loaded is None:
        refuse.add("torch_dtype", dtype, "fp16 parameters; zeroplan reads bfloat16 and float32")
        loaded = Precision.bf16_true
    if loaded is Precision.bf16_true and sharded:
        loaded = Precision.bf16_mixed
    said = "the checkpoint's dtype, bf16 assumed" if keys.torch_dtype is None else dtype
    return Taken("torch_dtype", keys.torch_dtype, "precision", loaded, f"--precision {loaded.value} (parameters loaded "
                 f"in {said}" + (", DeepSpeed's fp32 masters)" if sharded else ")"), "torch_dtype" not in stated)
