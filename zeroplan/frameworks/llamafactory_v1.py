"""LLaMA-Factory's v1 schema (`src/llamafactory/v1/config/`: `model`, `micro_batch_size`, `dist_config`, `peft_config`),
read as its v0 counterparts (frameworks/llamafactory.py). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import FileKeys, FrameworkRun, NotModelled, Positive, Taken, taker, validate_keys
from zeroplan.frameworks.trainer import attention_of
from zeroplan.frameworks.tuning import TrainOnly, split_arg
from zeroplan.memory.setup import Checkpointing, Engine, PostTraining, Precision


V1_DEFAULT_MODEL = "Qwen/Qwen3-4B-Instruct-2507"  # v1/config/model_args.py
# v1/config/training_args.py: the DPO trainer's keys (v1/trainers/dpo_trainer.py reads them); pref_loss orpo and simpo
# run without a reference model, as v0's. The trainer itself is the command's (v1/launcher.py: `llamafactory-cli v1
# sft|dpo|rm FILE`), not the file's: a file without these keys is read as sft, unless its dataset's name says
# preference data, when the command line must say which (--post-training).
PREFERENCE_KEYS = ("pref_loss", "pref_beta", "pref_ftx", "simpo_gamma", "dpo_label_smoothing", "ld_alpha")
PREFERENCE_DATA = ("dpo", "pref", "orpo", "kto", "reward", "_rm")


class DistConfig(FileKeys):
    name: str
    config_file: str | None = None


class LlamaFactoryV1Keys(FileKeys):
    model: str = V1_DEFAULT_MODEL
    micro_batch_size: Positive = 1
    cutoff_len: Positive = 2048
    bf16: bool = True
    enable_activation_checkpointing: bool = True
    flash_attn: str = "sdpa"
    dist_config: DistConfig | None = None
    cp_size: Positive = 1
    peft_config: dict[str, Any] | None = None
    quant_config: dict[str, Any] | None = None
    optim_config: dict[str, Any] | None = None
    pref_loss: str = "sigmoid"
    train_dataset: str | None = None


def read_llamafactory_v1(data: Mapping, origin: str) -> FrameworkRun:
    keys = validate_keys(LlamaFactoryV1Keys, data, origin)
    refuse = NotModelled(origin)
    tuning = _v1_tuning(keys.peft_config or {}, refuse)
    if keys.quant_config:
        refuse.add("quant_config.name", keys.quant_config.get("name"), "a quantized base model")
    if keys.optim_config and keys.optim_config.get("name") not in (None, "adamw"):
        refuse.add("optim_config.name", keys.optim_config.get("name"), "an optimizer other than AdamW")
    if keys.cp_size > 1:
        refuse.add("cp_size", keys.cp_size, "context parallelism")

    take = taker(keys)

    precision = Precision.bf16_mixed if keys.bf16 else Precision.fp32
    checkpointing = Checkpointing.full if keys.enable_activation_checkpointing else Checkpointing.none
    attention = attention_of(keys.flash_attn)
    taken = [take("model", "model", keys.model, f"--model {keys.model}"),
             take("micro_batch_size", "micro_batch", str(keys.micro_batch_size), f"--micro-batch {keys.micro_batch_size}"),
             take("cutoff_len", "seq_len", str(keys.cutoff_len), f"--seq-len {keys.cutoff_len} (the longest sequence)"),
             take("bf16", "precision", precision, f"--precision {precision.value}"),
             take("enable_activation_checkpointing", "checkpointing", checkpointing, f"--checkpointing {checkpointing.value}"),
             take("flash_attn", "attention", attention, f"--attention {attention.value}"),
             *_dist(keys.dist_config, refuse), *tuning, *_trainer(keys, data, refuse)]  # fmt: skip
    if (batching := data.get("batching_strategy")) not in (None, "normal"):
        # v1/plugins/trainer_plugins/batching.py: padding-free packs a micro-batch into one row of at most
        # micro_batch_size x cutoff_len tokens; dynamic batching fills that many padded tokens per micro-batch
        taken.append(Taken("batching_strategy", batching, None, None, f"at most micro_batch_size x cutoff_len tokens "
                           "per micro-batch, the bound estimated"))
    refuse.raise_any()
    kernels = data.get("kernel_config")  # v1/plugins/model_plugins/kernels/: fused kernels, savings only
    uncounted = ((f"kernel_config.name: {kernels.get('name')} (fused kernels)",)
                 if isinstance(kernels, Mapping) and kernels.get("name") else ())
    return FrameworkRun(FromKind.llamafactory, origin, tuple(taken), uncounted, asks=tuple(refuse.asks))


def _trainer(keys: LlamaFactoryV1Keys, data: Mapping, refuse: NotModelled) -> list[Taken]:
    """The DPO trainer when the file sets its keys; sft otherwise, said, or asked where the dataset is preference data."""
    if key := next((k for k in PREFERENCE_KEYS if k in data), None):
        pt = PostTraining(keys.pref_loss) if keys.pref_loss in ("orpo", "simpo") else PostTraining.dpo
        return [Taken(key, data[key] if isinstance(data[key], (str, int, float)) else "(set)", "post_training", pt,
                      f"--post-training {pt.value} (the dpo trainer's key)")]
    dataset = (keys.train_dataset or "").lower()
    if any(word in dataset for word in PREFERENCE_DATA):
        refuse.ask("post_training", "train_dataset", keys.train_dataset, "the trainer is the command's (llamafactory-cli "
                   "v1 sft|dpo|rm FILE), not the file's, and this dataset's name says preference data; give "
                   "--post-training dpo|orpo|simpo (or sft)")
    return [Taken("train_dataset", keys.train_dataset, None, None, "the trainer is the command's (llamafactory-cli v1 "
                  "sft|dpo FILE): read as sft; give --post-training dpo for `v1 dpo`", True)]


def _v1_tuning(peft: Mapping, refuse: NotModelled) -> list[Taken]:
    """v1 peft_config (v1/plugins/model_plugins/peft.py): lora (r 8, target_modules all, lora_dropout 0) or freeze, as v0's."""
    name = peft.get("name")
    if name is None:
        return [Taken("peft_config", None, None, None, "full fine-tuning: every parameter trained", True)]
    if name == "freeze":
        layers, modules, extra = peft.get("freeze_trainable_layers", 2), peft.get("freeze_trainable_modules", "all"), peft.get("freeze_extra_modules")
        if not isinstance(layers, int) or not isinstance(modules, str) or not isinstance(extra, (str, type(None))):
            refuse.add("peft_config.freeze_trainable_layers", layers, "a freeze rule zeroplan cannot read")
            return []
        rule = TrainOnly("peft_config.freeze_trainable_modules", layers, split_arg(modules), split_arg(extra))
        return [Taken("peft_config.name", name, "train_only", rule, f"freeze: only {layers} layers' {modules} train, the rest frozen")]
    if name != "lora":
        refuse.add("peft_config.name", name, "a PEFT method other than lora and freeze")
        return []
    rank, targets, dropout = peft.get("r", 8), peft.get("target_modules", "all"), peft.get("lora_dropout", 0.0)
    if not isinstance(rank, int) or rank < 1 or not isinstance(targets, str) or not isinstance(dropout, (int, float)):
        refuse.add("peft_config.r", rank, "a LoRA config zeroplan cannot read (r an integer, target_modules a string)")
        return []
    split = split_arg(targets)
    target = (Taken("peft_config.target_modules", targets, "lora_linear_names", "", "every *Linear* module but lm_head")
              if split == ("all",) else Taken("peft_config.target_modules", targets, "lora_targets", ",".join(split),
                                              f"--lora-targets {','.join(split)}"))
    return [Taken("peft_config.name", name, None, None, "LoRA adapters (peft), the base frozen"),
            Taken("peft_config.r", rank, "lora_rank", str(rank), f"--lora-rank {rank}"), target,
            Taken("peft_config.lora_dropout", dropout, "lora_dropout", float(dropout), f"--lora-dropout {dropout:g}")]


def _dist(dist: DistConfig | None, refuse: NotModelled) -> list[Taken]:
    if dist is None:
        return [Taken("dist_config", None, "engine", Engine.ddp, "--engine ddp (no dist_config)", True),
                Taken("dist_config", None, "stage", 0, "stage 0 (DDP)", True)]  # fmt: skip
    if dist.name == "deepspeed" and dist.config_file:
        return [Taken("dist_config.name", dist.name, "engine", Engine.deepspeed, "--engine deepspeed"),
                Taken("dist_config.config_file", dist.config_file, "deepspeed_config", dist.config_file, "--deepspeed-config")]
    if dist.name == "fsdp2":
        return [Taken("dist_config.name", dist.name, "engine", Engine.fsdp2, "--engine fsdp2"),
                Taken("dist_config.name", dist.name, "stage", 3, "reshard_after_forward=True (ZeRO-3 equivalent)")]
    refuse.add("dist_config.name", dist.name, "zeroplan reads deepspeed (with a config_file) and fsdp2")
    return []
