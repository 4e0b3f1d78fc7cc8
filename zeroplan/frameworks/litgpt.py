"""A litgpt fine-tuning config (`litgpt finetune_lora|finetune_full --config FILE`, config_hub/finetune/*): model,
GPUs, precision, 4-bit base, LoRA, batch and length.

Keys and defaults as Lightning-AI/litgpt@26857050fe3ff627cd714fe92f5838f51a3d5efa declares them: litgpt/finetune/lora.py
and full.py `setup` (checkpoint_dir, precision, quantize, devices, num_nodes, lora_*), litgpt/args.py TrainArgs
(global_batch_size, micro_batch_size, max_seq_length; gradient_accumulation_iters = global_batch_size // (devices x
num_nodes) // micro_batch_size). The script is named on the command line: a file with LoRA keys is read as
finetune_lora's, one without as finetune_full's. On one GPU Fabric wraps nothing and checkpoints nothing; on more,
finetune_lora shards with ModelParallelStrategy's fully_shard (FSDP2) after checkpoint_wrapper on every Block, finetune_full
with FSDPStrategy (FSDP1 FULL_SHARD, activation_checkpointing_policy={Block}). `quantize` (bitsandbytes) runs on one GPU
only and not under mixed precision (both raise in the script). litgpt's own loop (--training-loop litgpt) and its
QLoRA stack (--qlora-stack litgpt). A pretrain config (model_name, model_config) is refused. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import FileKeys, FrameworkRun, NotModelled, Positive, Taken, taker, validate_keys
from zeroplan.memory.setup import Checkpointing, Engine, Optimizer, Precision, TrainingLoop

LORA_KEYS = ("lora_r", "lora_alpha", "lora_dropout", "lora_query", "lora_key", "lora_value", "lora_projection",
             "lora_mlp", "lora_head")  # fmt: skip
# litgpt's LoRA switches -> the Hugging Face names zeroplan's LoRA targets use (litgpt's fused qkv is split by
# enable_lora into q, k and v parts of the same sizes; lora_mlp: the gated MLP's three linears)
TARGETS = {"lora_query": ("q_proj",), "lora_key": ("k_proj",), "lora_value": ("v_proj",), "lora_projection": ("o_proj",),
           "lora_mlp": ("gate_proj", "up_proj", "down_proj"), "lora_head": ("lm_head",)}  # fmt: skip
PRECISIONS = {"bf16-true": Precision.bf16_true, "bf16-mixed": Precision.bf16_mixed, "16-mixed": Precision.fp16_mixed,
              "32-true": Precision.fp32}  # fmt: skip
DEFAULT_PRECISION = "bf16-mixed"  # litgpt/utils.py get_default_supported_precision(training=True) on a bf16 GPU
QUANTIZE = {"bnb.nf4": ("nf4", False), "bnb.nf4-dq": ("nf4", True), "bnb.fp4": ("fp4", False), "bnb.fp4-dq": ("fp4", True)}
OPTIMIZERS = {"adamw": Optimizer.adamw, "torch.optim.adamw": Optimizer.adamw, "adam": Optimizer.adamw,
              "torch.optim.adam": Optimizer.adamw, "sgd": Optimizer.sgd, "torch.optim.sgd": Optimizer.sgd}  # fmt: skip


class LitgptKeys(FileKeys):
    checkpoint_dir: str | None = None
    precision: str | None = None
    quantize: str | None = None
    devices: Positive = 1
    num_nodes: Positive = 1
    lora_r: Positive = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    lora_query: bool = True
    lora_key: bool = False
    lora_value: bool = True
    lora_projection: bool = False
    lora_mlp: bool = False
    lora_head: bool = False
    train: dict[str, Any] = {}
    optimizer: str | dict[str, Any] = "AdamW"
    # read and changing nothing in the step: where it writes, what it logs, evaluation, seed, resume, access token
    out_dir: Any = None
    logger_name: Any = None
    access_token: Any = None
    resume: Any = None
    log: Any = None


def read_litgpt(data: Mapping, origin: str) -> FrameworkRun:
    """The run a litgpt finetune config describes; SpecError for what is not modelled."""
    refuse = NotModelled(origin)
    for key in ("model_name", "model_config", "initial_checkpoint_dir"):
        if key in data:
            refuse.add(key, data[key] if isinstance(data[key], str) else "(set)", "a litgpt pretrain config")
    refuse.raise_any()
    keys = validate_keys(LitgptKeys, data, origin)
    take = taker(keys)
    gpus = keys.devices * keys.num_nodes
    lora = any(k in data for k in LORA_KEYS)
    taken = [*_model(keys, take), take("devices", "gpus", str(gpus), f"--gpus {gpus} (devices x num_nodes)"),
             *_engine(gpus, lora, take), *_precision(keys, take, refuse), *_batch(keys, gpus, refuse),
             Taken("checkpoint_dir", keys.checkpoint_dir, "training_loop", TrainingLoop.litgpt,
                   "--training-loop litgpt (litgpt's finetune scripts on Lightning Fabric)")]  # fmt: skip
    if keys.num_nodes > 1:
        taken.append(take("num_nodes", "nodes", str(keys.num_nodes), f"--nodes {keys.num_nodes}"))
    taken += _lora(keys, take, refuse) if lora else [Taken("lora_r", None, None, None, "no LoRA key: finetune_full's "
                                                           "config, every parameter trained", True)]  # fmt: skip
    taken += _quantize(keys, gpus, lora, refuse)
    taken += _optimizer(keys, refuse)
    refuse.raise_any()
    return FrameworkRun(FromKind.litgpt, origin, tuple(taken))


def _model(keys: LitgptKeys, take) -> list[Taken]:
    """checkpoint_dir: litgpt downloads a Hub repository to checkpoints/<owner>/<name> (litgpt download)."""
    if keys.checkpoint_dir is None:
        return []
    written = keys.checkpoint_dir.rstrip("/")
    model = written.removeprefix("checkpoints/") if written.count("/") == 2 and written.startswith("checkpoints/") else written
    return [take("checkpoint_dir", "model", model, f"--model {model}")]


def _engine(gpus: int, lora: bool, take) -> list[Taken]:
    if gpus == 1:
        return [take("devices", "engine", Engine.none, "--engine none (one device: Fabric wraps nothing)"),
                take("devices", "stage", 0, "stage 0"),
                take("devices", "checkpointing", Checkpointing.none, "--checkpointing none (no checkpoint_wrapper)")]
    engine = Engine.fsdp2 if lora else Engine.fsdp
    how = "ModelParallelStrategy's fully_shard (FSDP2)" if lora else "FSDPStrategy (FSDP1 FULL_SHARD)"
    return [take("devices", "engine", engine, f"--engine {engine.value} ({how})"),
            take("devices", "stage", 3, "ZeRO-3 equivalent"),
            take("devices", "checkpointing", Checkpointing.full, "--checkpointing full (every Block checkpointed)")]


def _precision(keys: LitgptKeys, take, refuse: NotModelled) -> list[Taken]:
    written = keys.precision or DEFAULT_PRECISION
    precision = PRECISIONS.get(written)
    if precision is None:
        refuse.add("precision", written, "litgpt precisions read: bf16-true, bf16-mixed, 16-mixed, 32-true")
        return []
    return [take("precision", "precision", precision, f"--precision {precision.value}" if keys.precision else
                 f"--precision {precision.value} (litgpt's default on a bf16 GPU)")]


def _batch(keys: LitgptKeys, gpus: int, refuse: NotModelled) -> list[Taken]:
    train = keys.train
    micro, total, length = train.get("micro_batch_size", 1), train.get("global_batch_size", 16), train.get("max_seq_length")
    if not all(isinstance(v, int) and v > 0 for v in (micro, total)) or total // gpus // micro < 1:
        refuse.add("train.global_batch_size", total, f"with micro_batch_size {micro} on {gpus} GPU(s): litgpt's "
                   "gradient_accumulation_iters needs global_batch_size // GPUs // micro_batch_size >= 1")
        return []
    gas = total // gpus // micro
    return [Taken("train.micro_batch_size", micro, "micro_batch", str(micro), f"--micro-batch {micro}"),
            Taken("train.global_batch_size", total, "grad_accum", str(gas), f"--grad-accum {gas} (global_batch_size "
                  f"// {gpus} GPU(s) // micro_batch_size)"),
            Taken("train.max_seq_length", length, "seq_len", None if length is None else str(length),
                  f"--seq-len {length}" if length else "null: the dataset's longest sequence; give --seq-len",
                  length is None)]  # fmt: skip


def _lora(keys: LitgptKeys, take, refuse: NotModelled) -> list[Taken]:
    targets = [name for key, names in TARGETS.items() if getattr(keys, key) for name in names]
    if not targets:
        refuse.add("lora_query", False, "LoRA with every lora_* target false")
        return []
    chosen = [key for key in TARGETS if getattr(keys, key)]
    return [take("lora_r", "lora_rank", str(keys.lora_r), f"--lora-rank {keys.lora_r}"),
            *[take(key, None, None, f"adapters on {', '.join(TARGETS[key])}") for key in chosen[1:]],
            take(chosen[0], "lora_targets", ",".join(targets), f"--lora-targets {','.join(targets)} "
                 "(lora_query/key/value/projection/mlp/head as Hugging Face's names)"),
            take("lora_dropout", "lora_dropout", float(keys.lora_dropout), f"--lora-dropout {keys.lora_dropout:g}")]


def _quantize(keys: LitgptKeys, gpus: int, lora: bool, refuse: NotModelled) -> list[Taken]:
    if keys.quantize is None:
        return []
    if keys.quantize not in QUANTIZE:
        refuse.add("quantize", keys.quantize, "a quantization other than bnb.nf4(-dq) and bnb.fp4(-dq)")
    elif gpus > 1 or "mixed" in (keys.precision or DEFAULT_PRECISION) or not lora:
        refuse.add("quantize", keys.quantize, "with more than one GPU, mixed precision or full fine-tuning (litgpt's "
                   "finetune_lora raises on the first two)")
    else:
        kind, double = QUANTIZE[keys.quantize]
        return [Taken("quantize", keys.quantize, "qlora", True, "--qlora (bitsandbytes 4-bit base, the head too)"),
                Taken("quantize", keys.quantize, "qlora_stack", "litgpt", "--qlora-stack litgpt"),
                Taken("quantize", keys.quantize, "quant_type", kind, f"--quant-type {kind}"),
                Taken("quantize", keys.quantize, "double_quant", double, "--double-quant" if double else "no double quantization")]
    return []


def _optimizer(keys: LitgptKeys, refuse: NotModelled) -> list[Taken]:
    written = keys.optimizer if isinstance(keys.optimizer, str) else keys.optimizer.get("class_path")
    optimizer = OPTIMIZERS.get(str(written).lower())
    args = keys.optimizer.get("init_args") if isinstance(keys.optimizer, dict) else None
    momentum = args.get("momentum", 0) if isinstance(args, dict) else 0
    if optimizer is Optimizer.sgd and isinstance(momentum, (int, float)) and momentum > 0:
        optimizer = Optimizer.sgd_momentum
    if optimizer is None:
        refuse.add("optimizer", written, "an optimizer other than AdamW, Adam and SGD")
        return []
    return [Taken("optimizer", written, "optimizer", optimizer, f"--optimizer {optimizer.value}", "optimizer" not in keys.model_fields_set)]
