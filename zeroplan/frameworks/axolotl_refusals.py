"""What an axolotl YAML asks that zeroplan does not model, refused in one line naming each key (frameworks/axolotl.py
reads the rest). Keys as axolotl-ai-cloud/axolotl@067b021 declares them (src/axolotl/utils/schemas/). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zeroplan.frameworks.run import NotModelled
from zeroplan.memory.setup import PostTraining

DEGREES = {"context_parallel_size": "context parallelism", "sequence_parallel_degree": "sequence parallelism",
           "tensor_parallel_size": "tensor parallelism", "dp_replicate_size": "hybrid sharding (replicated shards)",
           "expert_parallel_size": "expert parallelism (each GPU holds its share of the experts)"}
READ_RL = {"dpo": PostTraining.dpo, "ipo": PostTraining.dpo, "orpo": PostTraining.orpo, "kto": PostTraining.kto}

# PEFT features that change which tensors train, that zeroplan's LoRA spec does not hold
PEFT_NOT_MODELLED = {"lora_target_parameters": "LoRA on expert parameters (peft target_parameters)",
                     "peft_layers_to_transform": "adapters on some layers only", "lora_rank_pattern": "per-module ranks",
                     "peft_layer_replication": "replicated layers", "peft_trainable_token_indices": "trainable tokens",
                     "lora_model_dir": "an existing adapter loaded: its adapter_config.json sets the rank and targets; "
                                       "give it with --adapter-config, without --from",
                     "gptq": "a GPTQ-quantized base", "quantize_moe_experts": "quantized MoE experts",
                     # schemas/quantization.py QATConfig; integrations/lisa: a few layers trained at a time
                     "qat": "quantization-aware training: fake-quantized weights and activations",
                     "lisa_n_layers": "LISA: a sample of layers trained at a time",
                     "torch_compile": "torch.compile's activation memory"}  # fmt: skip
# bnb_config_kwargs keys zeroplan reads (BitsAndBytesConfig's); llm_int8_* change no byte of a 4-bit base
BNB_KWARGS = ("bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_quant_storage", "bnb_4bit_compute_dtype",
              "llm_int8_threshold", "llm_int8_has_fp16_weight")


def refusals(keys: Any, data: Mapping, refuse: NotModelled) -> None:
    """Each key of `keys` (AxolotlKeys) and `data` that asks for what zeroplan does not model."""
    if keys.adapter not in (None, "lora", "qlora"):
        refuse.add("adapter", keys.adapter, "an adapter other than lora and qlora")
    if keys.adapter in ("lora", "qlora"):
        if keys.lora_r is None:
            refuse.add("adapter", keys.adapter, "without lora_r: axolotl passes r=None to peft's LoraConfig")
        if not keys.lora_target_modules and not keys.lora_target_linear:
            refuse.add("adapter", keys.adapter, "without lora_target_modules or lora_target_linear: no LoRA targets")
        if keys.unfrozen_parameters:
            refuse.add("unfrozen_parameters", count(keys.unfrozen_parameters), f"beside adapter {keys.adapter}")
    if keys.adapter == "lora" and keys.load_in_4bit:
        refuse.add("load_in_4bit", True, "with adapter lora, which axolotl loads unquantized (loaders/model.py builds "
                   "a 4-bit BitsAndBytesConfig for adapter qlora only); write adapter: qlora")  # fmt: skip
    if keys.adapter != "lora" and keys.load_in_8bit:
        refuse.add("load_in_8bit", True, "an 8-bit base without adapter lora")
    if keys.adapter is None and keys.load_in_4bit:
        refuse.add("load_in_4bit", True, "a 4-bit base without adapter qlora")
    if keys.adapter == "qlora" and not keys.load_in_4bit:
        refuse.add("adapter", "qlora", "without load_in_4bit (axolotl requires it)")
    for key, what in PEFT_NOT_MODELLED.items():
        if data.get(key) not in (None, False, [], {}):
            refuse.add(key, data[key] if isinstance(data[key], (str, int, bool)) else "(set)", what)
    for key in sorted(set(keys.bnb_config_kwargs or ()) - set(BNB_KWARGS)):
        refuse.add(f"bnb_config_kwargs.{key}", keys.bnb_config_kwargs[key], "a bitsandbytes option")
    for key, what in DEGREES.items():
        if (value := getattr(keys, key)) is not None and value > 1:
            refuse.add(key, value, what)
    for key in ("reward_model", "process_reward_model"):
        if getattr(keys, key):
            refuse.add(key, True, "a reward model: a score head in place of the language-model head")
    if keys.rl and keys.rl not in READ_RL:
        refuse.add("rl", keys.rl, "preference or RL training (reference model, generation)")
    if keys.rl in READ_RL and keys.adapter and keys.rl_adapter_ref_model:
        refuse.add("rl_adapter_ref_model", True, "a reference model loaded beside the adapters")
    if keys.rl in READ_RL and keys.liger_fused_linear_cross_entropy:
        refuse.add("liger_fused_linear_cross_entropy", True, "beside a preference trainer (Liger's fused loss)")
    if keys.fp8 and keys.adapter:
        refuse.add("fp8", True, f"FP8 training with adapter {keys.adapter} (modelled for full training)")
    if keys.fp8 and (keys.deepspeed is not None or (keys.fsdp_config is not None and keys.fsdp_version != 2)):
        refuse.add("fp8", True, "torchao float8 training under DeepSpeed or FSDP1 (modelled under FSDP2, DDP and one GPU)")
    if keys.float16:
        refuse.add("float16", True, "pure fp16 training")


def count(patterns: list[str]) -> str:
    return f"{len(patterns)} pattern{'s' * (len(patterns) != 1)}"
