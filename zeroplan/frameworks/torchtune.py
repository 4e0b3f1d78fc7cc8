"""A torchtune recipe config (`tune run RECIPE --config FILE`): model builder, LoRA, batch, length, dtype, optimizer.

Keys as torchtune's recipes read them (pytorch/torchtune@bd2a0fc: recipes/full_finetune_distributed.py,
lora_finetune_distributed.py; torchtune/models/*/_model_builders.py for `lora_attn_modules`, `apply_lora_to_mlp`,
`apply_lora_to_output`; a `qlora_*` builder is its `lora_*` one with `quantize_base=True`: --qlora --qlora-stack
torchtune): `batch_size`, `gradient_accumulation_steps`, `tokenizer.max_seq_len` (null: the dataset's longest),
`dtype` (bf16 trains the bf16 parameters themselves, no fp32 master: bf16-true), `enable_activation_checkpointing`,
`optimizer_in_bwd`, `fsdp_cpu_offload`, `fsdp_reshard_after_forward` (default true). The recipe is named on the
command line, not in the file: zeroplan sizes the distributed recipes' FSDP2 (fully_shard), which on one GPU shards
nothing. Docs: https://docs.pytorch.org/torchtune/. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import FileKeys, FrameworkRun, NotModelled, Positive, Taken, validate_keys
from zeroplan.frameworks.torchtune_builders import SAME_SHAPE_BUILDERS
from zeroplan.memory.setup import Checkpointing, Engine, Loss, OffloadDevice, Optimizer, Precision

# torchtune builder (lora_/qlora_ prefix dropped) -> zeroplan preset of the same shapes
BUILDERS = {"llama3_1_8b": "llama-3.1-8b", "llama3_1_70b": "llama-3.1-70b", "llama3_1_405b": "llama-3.1-405b",
            "llama2_7b": "llama-2-7b", "mistral_7b": "mistral-7b", "qwen2_5_7b_base": "qwen2.5-7b",
            "qwen2_5_7b_instruct": "qwen2.5-7b", "qwen2_5_72b_instruct": "qwen2.5-72b", "gemma2_2b": "gemma2-2b",
            "gemma2_9b": "gemma2-9b", "gemma2_27b": "gemma2-27b", "qwen3_8b_base": "qwen3-8b",
            "qwen3_8b_instruct": "qwen3-8b", "qwen3_32b": "qwen3-32b", "phi4_14b": "phi-4",
            # torchtune/models/llama3_3/_model_builders.py: llama3_3_70b = llama3_1_70b ("identical models apart from
            # the checkpoints"); llama3/_model_builders.py: Llama 3's shapes are Llama 3.1's, its RoPE unscaled
            "llama3_3_70b": "llama-3.1-70b", "llama3_8b": "llama-3.1-8b", "llama3_70b": "llama-3.1-70b"}  # fmt: skip
OPTIMIZERS = {"torch.optim.AdamW": Optimizer.adamw, "torch.optim.Adam": Optimizer.adamw,
              "bitsandbytes.optim.PagedAdamW8bit": Optimizer.paged_adamw_8bit,
              "bitsandbytes.optim.PagedAdamW": Optimizer.paged_adamw, "bitsandbytes.optim.AdamW8bit": Optimizer.adamw_8bit,
              "torchao.optim.AdamW8bit": Optimizer.adamw_8bit, "torch.optim.SGD": Optimizer.sgd}  # fmt: skip
# torchtune's attention projections -> the Hugging Face names zeroplan's LoRA targets use
ATTENTION_NAMES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
MLP_NAMES = ("gate_proj", "up_proj", "down_proj")  # torchtune's w1, w3, w2
CHUNKED_LOSSES = ("torchtune.modules.loss.LinearCrossEntropyLoss", "torchtune.modules.loss.CEWithChunkedOutputLoss")
OTHER_MODELS = {"teacher_model": "knowledge distillation (a frozen teacher model)", "ref_policy_checkpointer":
                "PPO (reference, reward and value models)", "reward_and_value_model": "PPO (reward and value models)",
                # recipes/dev/async_grpo_full_finetune_distributed.py: vLLM workers, reward functions
                "reward_functions": "GRPO (generation, reward functions)", "orchestration": "async GRPO (vLLM workers)"}


class TorchtuneKeys(FileKeys):
    model: dict[str, Any]
    tokenizer: dict[str, Any] = {}
    batch_size: Positive = 1
    gradient_accumulation_steps: Positive = 1
    dtype: str = "bf16"
    enable_activation_checkpointing: bool = False
    enable_activation_offloading: bool = False
    optimizer: dict[str, Any] = {}
    optimizer_in_bwd: bool = False
    loss: dict[str, Any] = {}
    compile: bool | dict[str, Any] = False
    fsdp_cpu_offload: bool = False
    fsdp_reshard_after_forward: bool = True


def read_torchtune(data: Mapping, origin: str) -> FrameworkRun:
    keys = validate_keys(TorchtuneKeys, data, origin)
    stated, refuse = keys.model_fields_set, NotModelled(origin)
    for key, what in OTHER_MODELS.items():
        if key in data:
            refuse.add(key, "(set)", what)
    loss = str(keys.loss.get("_component_", ""))
    if "DPO" in loss or "rlhf" in loss:
        refuse.add("loss._component_", loss, "preference training: a reference model")
    compiled = _compile(keys.compile, refuse)
    if isinstance(data.get("quantizer"), Mapping):  # recipes/qat_*.py: fake-quantized weights and activations
        refuse.add("quantizer._component_", data["quantizer"].get("_component_", "(set)"), "quantization-aware "
                   "training: fake-quantized weights and activations")
    builder = str(keys.model.get("_component_", ""))
    taken = _model(builder, keys.model, refuse)
    micro, gas = keys.batch_size, keys.gradient_accumulation_steps
    taken += [Taken("batch_size", micro, "micro_batch", str(micro), f"--micro-batch {micro}", "batch_size" not in stated),
              Taken("gradient_accumulation_steps", gas, "grad_accum", str(gas), f"--grad-accum {gas}",
                    "gradient_accumulation_steps" not in stated)]
    length = keys.tokenizer.get("max_seq_len")
    taken.append(Taken("tokenizer.max_seq_len", length, "seq_len", None if length is None else str(length),
                       f"--seq-len {length}" if length else "null: the dataset's longest sequence; give --seq-len",
                       length is None))  # fmt: skip
    reshard = keys.fsdp_reshard_after_forward
    taken += [Taken("fsdp_reshard_after_forward", reshard, "engine", Engine.fsdp2, "--engine fsdp2 (the distributed "
                    "recipes' fully_shard; on one GPU it shards nothing)", "fsdp_reshard_after_forward" not in stated),
              Taken("fsdp_reshard_after_forward", reshard, "stage", 3 if reshard else 2, f"ZeRO-{3 if reshard else 2} "
                    "equivalent", "fsdp_reshard_after_forward" not in stated)]
    if keys.fsdp_cpu_offload:
        taken += [Taken("fsdp_cpu_offload", True, "offload_param", OffloadDevice.cpu, "--offload-param cpu"),
                  Taken("fsdp_cpu_offload", True, "offload_optimizer", OffloadDevice.cpu, "--offload-optimizer cpu")]
    taken += _precision(keys.dtype, "dtype" not in stated, refuse)
    taken.append(_checkpointing(keys, data, stated, refuse))
    if isinstance(data.get("tensor_parallel_dim"), int) and data["tensor_parallel_dim"] > 1:
        refuse.add("tensor_parallel_dim", data["tensor_parallel_dim"], "tensor parallelism")
    taken += _optimizer(keys, refuse) + compiled
    if loss in CHUNKED_LOSSES:
        taken.append(Taken("loss._component_", loss, "loss", Loss.chunked, "--loss chunked (the output in 8 chunks, each upcast on its own)"))
    elif loss and not ("DPO" in loss or "rlhf" in loss):
        refuse.add("loss._component_", loss, "a loss other than torchtune's chunked cross-entropy")
    refuse.raise_any()
    uncounted = ("enable_activation_offloading: true",) if keys.enable_activation_offloading else ()
    return FrameworkRun(FromKind.torchtune, origin, tuple(taken), uncounted)


def _compile(written: bool | dict, refuse: NotModelled) -> list[Taken]:
    """compile: true, or {model, loss, optimizer_step}: torchtune/training/_compile.py compile_model compiles each
    transformer layer (--compile); a compiled loss is counted as eager's (an upper bound); a compiled step is refused."""
    parts = written if isinstance(written, dict) else {"model": written, "loss": written}
    if parts.get("optimizer_step"):
        refuse.add("compile.optimizer_step", True, "a compiled optimizer step")
    if not parts.get("model"):
        return []
    return [Taken("compile", written if isinstance(written, bool) else "(set)", "compile", True,
                  "--compile (each layer compiled" + ("; the compiled loss counted as eager's, an upper bound)"
                                                     if parts.get("loss") else ")"))]


def _checkpointing(keys: TorchtuneKeys, data: Mapping, stated: set[str], refuse: NotModelled) -> Taken:
    """enable_activation_checkpointing; without it, the dev recipes' ac_mode / ac_option
    (recipes/dev/early_exit_finetune_distributed.py: selective AC, an integer option every n-th layer)."""
    mode, option = data.get("ac_mode"), data.get("ac_option")
    if not keys.enable_activation_checkpointing and mode is not None:
        if mode == "full" or (mode == "selective" and option == 1):
            return Taken("ac_mode", mode, "checkpointing", Checkpointing.full, "--checkpointing full (every layer)")
        if mode == "selective" and isinstance(option, int) and option > 1:
            return Taken("ac_option", option, "checkpointing", f"every:{option}", f"--checkpointing every:{option} "
                         f"(ac_mode selective: one layer in {option} checkpointed)")
        refuse.add("ac_mode", mode, f"with ac_option {option}: selective checkpointing other than every n-th layer")
    checkpointing = Checkpointing.full if keys.enable_activation_checkpointing else Checkpointing.none
    return Taken("enable_activation_checkpointing", keys.enable_activation_checkpointing, "checkpointing",
                 checkpointing, f"--checkpointing {checkpointing.value}", "enable_activation_checkpointing" not in stated)


def _model(builder: str, section: Mapping, refuse: NotModelled) -> list[Taken]:
    name = builder.rsplit(".", 1)[-1]
    quantized = name.startswith("qlora_")  # qlora_X = partial(lora_X, quantize_base=True): torchao NF4 base
    name = name.removeprefix("q") if quantized else name
    base = name.removeprefix("lora_")
    preset = BUILDERS.get(base) or SAME_SHAPE_BUILDERS.get(base)
    taken = [Taken("model._component_", builder, "model", preset, f"--model {preset}" if preset else
                   f"{base}: no zeroplan preset has this builder's shapes; give --model")]  # fmt: skip
    if not name.startswith("lora_"):
        return [*taken, Taken("model._component_", builder, None, None, "full fine-tuning: every parameter trained")]
    targets = []
    for module in section.get("lora_attn_modules") or []:
        if module not in ATTENTION_NAMES:
            refuse.add("model.lora_attn_modules", module, "an attention module torchtune does not name")
        else:
            targets.append(ATTENTION_NAMES[module])
    if section.get("apply_lora_to_mlp"):
        targets += MLP_NAMES
    if section.get("apply_lora_to_output"):
        targets.append("lm_head")
    rank, dropout = section.get("lora_rank"), section.get("lora_dropout", 0.0)
    if not isinstance(rank, int) or rank < 1 or not targets:
        refuse.add("model.lora_rank", rank, "LoRA without a rank or targets")
        return taken
    if section.get("use_dora"):
        taken.append(Taken("model.use_dora", True, "dora", True, "--dora"))
    if quantized:
        taken += [Taken("model._component_", builder, "qlora", True, "--qlora (torchao NF4 base weights)"),
                  Taken("model._component_", builder, "qlora_stack", "torchtune", "--qlora-stack torchtune")]
    return [*taken, Taken("model.lora_rank", rank, "lora_rank", str(rank), f"--lora-rank {rank}"),
            Taken("model.lora_attn_modules", ",".join(targets), "lora_targets", ",".join(targets),
                  f"--lora-targets {','.join(targets)} (with apply_lora_to_mlp / _output; torchtune's names as Hugging Face's)"),
            Taken("model.lora_dropout", dropout, "lora_dropout", float(dropout), f"--lora-dropout {dropout:g}")]


def _precision(dtype: str, default: bool, refuse: NotModelled) -> list[Taken]:
    """torchtune casts the model to `dtype` and steps the optimizer on those parameters: no fp32 master."""
    precision = {"bf16": Precision.bf16_true, "fp32": Precision.fp32}.get(dtype)
    if precision is None:
        refuse.add("dtype", dtype, "torchtune trains bf16 or fp32")
        return []
    return [Taken("dtype", dtype, "precision", precision, f"--precision {precision.value} (the parameters themselves in "
                  f"{dtype}, no fp32 master)", default)]


def _optimizer(keys: TorchtuneKeys, refuse: NotModelled) -> list[Taken]:
    component = str(keys.optimizer.get("_component_", "torch.optim.AdamW"))
    optimizer = OPTIMIZERS.get(component)
    if optimizer is None:
        refuse.add("optimizer._component_", component, "an optimizer zeroplan has no byte recipe for")
        return []
    taken = [Taken("optimizer._component_", component, "optimizer", optimizer, f"--optimizer {optimizer.value}")]
    if keys.optimizer_in_bwd:
        taken.append(Taken("optimizer_in_bwd", True, "optimizer_in_backward", True, "--optimizer-in-backward"))
    return taken
