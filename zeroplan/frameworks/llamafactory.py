"""A LLaMA-Factory training YAML (`llamafactory-cli train FILE`): model, fine-tuning type, DeepSpeed, batch, length.

Keys and defaults as LLaMA-Factory's hparams dataclasses declare them (hiyouga/LLaMA-Factory@ff6d4d1:
src/llamafactory/hparams/model_args.py, data_args.py, finetuning_args.py; transformers' TrainingArguments for the
batch, precision and optim), and its v1 schema (src/llamafactory/v1/config/: `model`, `micro_batch_size`, `dist_config`). An absent key takes
LLaMA-Factory's default, and the assumptions say so: `finetuning_type` defaults to lora (rank 8 on `all` linears),
gradient checkpointing is on unless `disable_gradient_checkpointing`. The fine-tuning keys become the options
docs/finetune.md describes (`_tuning`); the rules that need the model are resolved in zeroplan.frameworks.tuning.
Docs: https://llamafactory.readthedocs.io/en/latest/. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from zeroplan.errors import SpecError
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
from zeroplan.frameworks.tuning import TrainOnly, split_arg
from zeroplan.memory.setup import Checkpointing, Engine, Loss, PostTraining, Precision

TRAINED_STAGES = ("pt", "sft", "dpo")  # one model trained (dpo: a frozen reference beside it); rm/ppo/kto are refused
# hparams/finetuning_args.py __post_init__ (hiyouga/LLaMA-Factory@ff6d4d12e): use_ref_model = stage dpo and pref_loss
# not orpo or simpo; train/trainer_utils.py create_ref_model: no ref_model and lora -> None (adapter-disabled base)
NO_REFERENCE_LOSSES = ("orpo", "simpo")
STAGE_WORDS = {"rm": "a reward model (value head)", "ppo": "PPO (policy, reference, reward and value models)",
               "dpo": "DPO (a reference model)", "kto": "LLaMA-Factory's own KTO trainer (train/kto/trainer.py; "
               "--post-training kto models TRL's KTOTrainer)"}  # fmt: skip
# LLaMA-Factory's Megatron backends (examples/megatron/, examples/megatron_bridge/: mcore_adapter, Megatron Bridge)
MEGATRON_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
                 "context_parallel_size", "use_distributed_optimizer", "recompute_granularity")
OPTIMIZER_FLAGS = {"use_galore": "GaLore", "use_apollo": "APOLLO", "use_badam": "BAdam", "use_adam_mini": "Adam-mini",
                   "use_muon": "Muon"}  # fmt: skip
# Keys of model_args.py / finetuning_args.py (hiyouga/LLaMA-Factory@ff6d4d12e) that change the step's memory in ways
# zeroplan does not model: each true value is refused by name (model/loader.py, model/patcher.py, model_utils/)
CHANGES_MEMORY = {"use_kt": "KTransformers: MoE experts on the CPU",
                  "use_unsloth": "Unsloth's patched model and kernels", "use_unsloth_gc": "Unsloth's gradient "
                  "checkpointing, the checkpoints offloaded to the CPU", "mixture_of_depths": "Mixture-of-Depths "
                  "routers (tokens skip blocks)", "shift_attn": "LongLoRA's shifted short attention (S^2-Attn)",
                  "upcast_lmhead_output": "the LM head's output cast to fp32 (model_utils/checkpointing.py)",
                  "upcast_layernorm": "norm weights cast to fp32", "use_mca": "the Megatron-Core adapter (mcore_adapter)",
                  "use_megatron_bridge": "the Megatron Bridge backend", "use_hyper_parallel": "HyperParallel's mesh"}
# losses that reweight the per-token cross-entropy (train/trainer_utils.py dft_loss_func, eaft_loss_func): logits.float()
# then cross_entropy(reduction="none"), the bytes of the Trainer's loss (--loss hf), plus T weights under no_grad
REWEIGHTED_LOSSES = {"use_dft_loss": "DFT", "use_eaft_loss": "EAFT (its top-20 entropy under no_grad)"}


class LlamaFactoryKeys(FileKeys):
    model_name_or_path: str | None = None
    finetuning_type: Literal["lora", "oft", "freeze", "full"] = "lora"
    # finetuning_args.py LoraArguments, FreezeArguments; model_args.py QuantizationArguments
    lora_rank: Positive = 8
    lora_target: str = "all"
    lora_alpha: int | None = None
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    additional_target: str | None = None
    use_dora: bool = False
    use_rslora: bool = False
    pissa_init: bool = False
    loraplus_lr_ratio: float | None = None
    create_new_adapter: bool = False
    adapter_name_or_path: str | None = None
    use_llama_pro: bool = False
    freeze_trainable_layers: int = 2
    freeze_trainable_modules: str = "all"
    freeze_extra_modules: str | None = None
    quantization_method: str = "bnb"
    quantization_type: Literal["nf4", "fp4"] = "nf4"
    double_quantization: bool = True
    stage: str = "sft"
    pref_loss: str = "sigmoid"
    ref_model: str | None = None
    deepspeed: str | None = None
    per_device_train_batch_size: Positive = 8
    gradient_accumulation_steps: Positive = 1
    cutoff_len: Positive = 2048
    bf16: bool = False
    fp16: bool = False
    pure_bf16: bool = False
    fp8: bool = False
    flash_attn: Literal["auto", "disabled", "sdpa", "fa2", "fa3"] = "auto"
    disable_gradient_checkpointing: bool = False
    optim: str = "adamw_torch"
    quantization_bit: int | None = None
    freeze_language_model: bool = False
    use_galore: bool = False
    use_apollo: bool = False
    use_badam: bool = False
    use_adam_mini: bool = False
    use_muon: bool = False
    enable_liger_kernel: bool = False
    use_asft_loss: bool = False
    use_dft_loss: bool = False
    use_eaft_loss: bool = False
    use_v1_kernels: bool | None = False


def read_llamafactory(data: Mapping, origin: str) -> FrameworkRun:
    """The run a LLaMA-Factory YAML describes (v0 keys, or the v1 schema's); SpecError for what is not modelled."""
    if "model_name_or_path" not in data and ("model" in data or "dist_config" in data):
        from zeroplan.frameworks.llamafactory_v1 import read_llamafactory_v1

        return read_llamafactory_v1(data, origin)
    keys = validate_keys(LlamaFactoryKeys, data, origin)
    stated, refuse = keys.model_fields_set, NotModelled(origin)
    if megatron := {k: data[k] for k in MEGATRON_KEYS if k in data}:
        mesh = ", ".join(f"{k}: {v}" for k, v in megatron.items())
        raise SpecError(f"{origin}: {mesh}: LLaMA-Factory's Megatron-Core backend is not read from the file; estimate "
                        "it with --method megatron and its --tp/--pp/--ep (docs/megatron.md)")
    _refusals(keys, data, refuse)

    def take(key: str, option: str | None, value: Any, means: str, written: Any = None) -> Taken:
        return Taken(key, getattr(keys, key) if written is None else written, option, value, means, key not in stated)

    taken = _tuning(keys, stated, take)
    if keys.model_name_or_path is not None:
        taken.append(take("model_name_or_path", "model", keys.model_name_or_path, f"--model {keys.model_name_or_path}"))
    if keys.deepspeed is not None:
        taken += [take("deepspeed", "engine", Engine.deepspeed, "--engine deepspeed"),
                  take("deepspeed", "deepspeed_config", keys.deepspeed, "--deepspeed-config")]
    else:
        taken += ddp_by_default("deepspeed")
    micro, gas, length = keys.per_device_train_batch_size, keys.gradient_accumulation_steps, keys.cutoff_len
    taken += [take("per_device_train_batch_size", "micro_batch", str(micro), f"--micro-batch {micro}"),
              take("gradient_accumulation_steps", "grad_accum", str(gas), f"--grad-accum {gas}"),
              take("cutoff_len", "seq_len", str(length), f"--seq-len {length} (the longest sequence)")]  # fmt: skip
    taken.append(_precision(keys, stated))
    attention = attention_of(keys.flash_attn)
    taken.append(take("flash_attn", "attention", attention, f"--attention {attention.value}"))
    checkpointing = Checkpointing.none if keys.disable_gradient_checkpointing else Checkpointing.full
    taken.append(take("disable_gradient_checkpointing", "checkpointing", checkpointing, f"--checkpointing {checkpointing.value}"))
    if (optimizer := optimizer_taken("optim", keys.optim, "optim" not in stated, refuse)) is not None:
        taken.append(optimizer)
    if keys.stage == "dpo":  # train/dpo/trainer.py concatenated_forward: chosen and rejected rows in one batch
        pt = PostTraining(keys.pref_loss) if keys.pref_loss in NO_REFERENCE_LOSSES else PostTraining.dpo
        taken.append(take("stage", "post_training", pt, f"--post-training {pt.value}"))
        taken.append(take("pref_loss", None, keys.pref_loss, "with a reference model" if pt.reference else
                          "no reference model (use_ref_model false)"))
    if keys.use_asft_loss and keys.stage == "sft":  # sft/workflow.py: the reference ASFT forwards (memory.posttrain)
        taken.append(take("use_asft_loss", "post_training", PostTraining.asft, "--post-training asft (a frozen "
                          "reference forwarded before the policy, its logits kept for the KL)"))
    for flag, name in REWEIGHTED_LOSSES.items():
        if getattr(keys, flag) and keys.stage in ("pt", "sft"):
            taken.append(take(flag, None, None, f"{name}: the per-token cross-entropy reweighted, the loss's bytes as "
                              "--loss hf (fp32 logits, log-softmax)"))
    refuse.raise_any()
    # apply_liger_kernel (src/llamafactory/model/model_utils/liger_kernel.py) keeps Liger's default
    # fused_linear_cross_entropy for the pt and sft stages, the only ones read here
    if keys.enable_liger_kernel:
        taken.append(take("enable_liger_kernel", "loss", Loss.liger, "--loss liger"))
    uncounted = (("enable_liger_kernel: true (Liger's RMSNorm, RoPE and SwiGLU kernels)",)
                 if keys.enable_liger_kernel else ())
    if keys.use_v1_kernels:  # v1/plugins/model_plugins/kernels/interface.py apply_v1_kernels: the "auto" fused kernels
        uncounted += ("use_v1_kernels: true (LLaMA-Factory's v1 fused kernels)",)
    return FrameworkRun(FromKind.llamafactory, origin, tuple(taken), uncounted)


def _refusals(keys: LlamaFactoryKeys, data: Mapping, refuse: NotModelled) -> None:
    if keys.finetuning_type == "oft":
        refuse.add("finetuning_type", keys.finetuning_type, "OFT adapters")
    if keys.stage not in TRAINED_STAGES:
        refuse.add("stage", keys.stage, STAGE_WORDS.get(keys.stage, "a training stage other than pt or sft"))
    _quant_refusals(keys, refuse)
    if keys.finetuning_type in ("lora", "freeze") and keys.use_llama_pro:
        refuse.add("use_llama_pro", True, "LLaMA Pro: expanded blocks")
    if keys.finetuning_type == "lora" and keys.adapter_name_or_path is not None:
        refuse.add("adapter_name_or_path", keys.adapter_name_or_path, "an existing adapter merged or resumed; its own "
                   "adapter_config.json sets the rank and targets: give it with --adapter-config, without --from")  # fmt: skip
    if keys.stage == "dpo" and keys.ref_model is not None and keys.pref_loss not in NO_REFERENCE_LOSSES:
        refuse.add("ref_model", keys.ref_model, "a reference model other than the policy's base (its own config)")
    if keys.stage == "dpo" and keys.enable_liger_kernel:
        refuse.add("enable_liger_kernel", True, "Liger's kernels under the dpo stage (its loss needs the logits)")
    # hiyouga/LLaMA-Factory@ff6d4d12e train/trainer_utils.py create_ref_model: under lora without ref_model there is no
    # reference, and sft/trainer.py compute_loss calls it (the run fails); a ref_model is another model's config
    if keys.use_asft_loss and keys.stage == "sft" and keys.ref_model is not None:
        refuse.add("ref_model", keys.ref_model, "ASFT's reference model other than the policy's base (its own config)")
    elif keys.use_asft_loss and keys.stage == "sft" and keys.finetuning_type == "lora":
        refuse.add("use_asft_loss", True, "under lora: create_ref_model makes no reference and ASFT's compute_loss "
                   "calls it (the run fails)")  # fmt: skip
    if keys.fp8:
        refuse.add("fp8", True, "FP8 training")
    if keys.freeze_language_model:
        refuse.add("freeze_language_model", True, "a frozen language model")
    for flag, name in OPTIMIZER_FLAGS.items():
        if getattr(keys, flag):
            refuse.add(flag, True, f"the {name} optimizer")
    for flag, what in CHANGES_MEMORY.items():
        if data.get(flag) not in (None, False, "", "null"):
            refuse.add(flag, data[flag] if isinstance(data[flag], (str, int, bool)) else "(set)", what)


def _quant_refusals(keys: LlamaFactoryKeys, refuse: NotModelled) -> None:
    """quantization_bit: bitsandbytes 4 or 8 bits under LoRA (model_utils/quantization.py configure_quantization)."""
    if keys.quantization_bit is None:
        return
    if keys.quantization_method != "bnb":
        refuse.add("quantization_method", keys.quantization_method, "a quantized base other than bitsandbytes")
    elif keys.quantization_bit not in (4, 8):
        refuse.add("quantization_bit", keys.quantization_bit, "bitsandbytes quantizes to 4 or 8 bits only")
    elif keys.finetuning_type != "lora":  # hparams/parser.py _verify_model_args refuses it too
        refuse.add("quantization_bit", keys.quantization_bit, f"a quantized base under finetuning_type "
                   f"{keys.finetuning_type}: LLaMA-Factory quantizes for LoRA or OFT only")  # fmt: skip


# bnb_4bit_quant_storage = model_args.compute_dtype (model_utils/quantization.py, "crucial for fsdp+qlora"): bf16 for
# bf16 or pure_bf16, fp16 for fp16 (hparams/parser.py), else None, which BitsAndBytesConfig makes uint8
def _quant_storage(keys: LlamaFactoryKeys) -> str:
    return "bfloat16" if keys.bf16 or keys.pure_bf16 else "float16" if keys.fp16 else "uint8"


def _tuning(keys: LlamaFactoryKeys, stated: set[str], take) -> list[Taken]:
    """finetuning_type full, freeze (adapter.py _setup_freeze_tuning) or lora (adapter.py _setup_lora_tuning: peft's
    LoraConfig with r, target_modules, lora_dropout, use_rslora, use_dora, modules_to_save = additional_target)."""
    kind = keys.finetuning_type
    if kind == "full":
        return [take("finetuning_type", None, None, "full fine-tuning: every parameter trained")]
    if kind == "freeze":
        modules, extra = split_arg(keys.freeze_trainable_modules), split_arg(keys.freeze_extra_modules)
        rule = TrainOnly("freeze_trainable_modules", keys.freeze_trainable_layers, modules, extra)
        n = keys.freeze_trainable_layers
        where = f"the last {n} layers" if n > 0 else f"the first {-n} layers"
        what = "" if modules == ("all",) else f" {', '.join(modules)}"
        return [take("finetuning_type", "train_only", rule, f"freeze: only {where}{what} train"
                     + (f", and {', '.join(extra)}" if extra else "") + ", the rest frozen (--freeze of the rest)"),
                take("freeze_trainable_layers", None, None, f"{where} (LLaMA-Factory: > 0 the last, < 0 the first)"),
                take("freeze_trainable_modules", None, None, "their modules matched as substrings '.i.module' of the names")]
    lora = [take("finetuning_type", None, None, "LoRA adapters (peft), the base frozen"),
            take("lora_rank", "lora_rank", str(keys.lora_rank), f"--lora-rank {keys.lora_rank}")]
    targets = split_arg(keys.lora_target)
    if targets == ("all",):
        lora.append(take("lora_target", "lora_linear_names", "", "every *Linear* module but lm_head, by name "
                         "(find_all_linear_modules; --lora-targets those names)"))
    else:
        lora.append(take("lora_target", "lora_targets", ",".join(targets), f"--lora-targets {','.join(targets)}"))
    lora.append(take("lora_dropout", "lora_dropout", keys.lora_dropout, f"--lora-dropout {keys.lora_dropout:g}"))
    if keys.use_dora:
        lora.append(take("use_dora", "dora", True, "--dora"))
    if keys.additional_target:
        saved = ",".join(split_arg(keys.additional_target))
        lora.append(take("additional_target", "modules_to_save", saved, f"--modules-to-save {saved}"))
    for key in ("lora_alpha", "use_rslora", "loraplus_lr_ratio", "pissa_init"):
        if key in stated:
            lora.append(take(key, None, None, "a scale, learning rate or initialisation: no byte"))
    if keys.quantization_bit == 4:
        storage = _quant_storage(keys)
        lora += [take("quantization_bit", "qlora", True, "--qlora (bitsandbytes 4-bit base)"),
                 Taken("quantization_bit", 4, "qlora_stack", "llamafactory", "--qlora-stack llamafactory (no fp32 cast)"),
                 take("quantization_type", "quant_type", keys.quantization_type, f"--quant-type {keys.quantization_type}"),
                 take("double_quantization", "double_quant", keys.double_quantization,
                      "--double-quant" if keys.double_quantization else "no double quantization"),
                 Taken("quantization_bit", 4, "quant_storage", storage, f"--quant-storage {storage} (LLaMA-Factory stores "
                       "the 4-bit weights in the compute dtype)")]  # fmt: skip
    elif keys.quantization_bit == 8:
        lora.append(take("quantization_bit", "load_in_8bit", True, "--load-in-8bit (bitsandbytes LLM.int8 base)"))
    return lora


def _precision(keys: LlamaFactoryKeys, stated: set[str]) -> Taken:
    """pure_bf16: bf16 without fp32 master; bf16 / fp16: mixed precision; neither: fp32, the Trainer's default."""
    for key, precision in (("pure_bf16", Precision.bf16_true), ("bf16", Precision.bf16_mixed), ("fp16", Precision.fp16_mixed)):
        if getattr(keys, key):
            return Taken(key, True, "precision", precision, f"--precision {precision.value}")
    absent = not ({"bf16", "fp16", "pure_bf16"} & stated)
    return Taken("bf16", False, "precision", Precision.fp32, "--precision fp32 (neither bf16 nor fp16)", absent)
