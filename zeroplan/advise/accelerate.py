"""An Accelerate config (the `accelerate launch --config_file` YAML mapping) for a PyTorch-engine recommendation.

FSDP1 and FSDP2 get `distributed_type: FSDP` and an `fsdp_config` with the sharding the advisor chose, the
transformer block class to wrap (the unit the memory model wraps, docs/engines.md), activation checkpointing when
the plan needs it and no offload (not modelled); DDP gets `distributed_type: MULTI_GPU`. What Accelerate's file
cannot say (ZeroRedundancyOptimizer, gradient_as_bucket_view, the node's rank) comes back as notes.
Keys: Accelerate's examples/config_yaml_templates (fsdp.yaml, multi_gpu.yaml), docs/source/usage_guides/fsdp.md and
concept_guides/fsdp1_vs_fsdp2.md (FSDP2: fsdp_version 2, fsdp_reshard_after_forward replaces
fsdp_sharding_strategy). Pure: returns a dict and notes; commands_advise renders the YAML, cli/files.py writes it.
"""

from __future__ import annotations

from zeroplan.advise.advice import Advice
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.memory.engines import strategy_settings
from zeroplan.memory.setup import Checkpointing, Engine, Precision

# HF model_type -> the decoder/encoder block class transformers defines (its `_no_split_modules`, checked against
# transformers 5.24 by tests/test_accelerate_emit.py when transformers is installed).
LAYER_CLASSES = {
    "bloom": "BloomBlock",
    "deepseek_v2": "DeepseekV2DecoderLayer",
    "deepseek_v3": "DeepseekV3DecoderLayer",
    "falcon": "FalconDecoderLayer",
    "gemma": "GemmaDecoderLayer",
    "gemma2": "Gemma2DecoderLayer",
    "gemma3_text": "Gemma3DecoderLayer",
    "gemma4_text": "Gemma4TextDecoderLayer",
    "glm4": "Glm4DecoderLayer",
    "glm4_moe": "Glm4MoeDecoderLayer",
    "gpt2": "GPT2Block",
    "gpt_neox": "GPTNeoXLayer",
    "gpt_oss": "GptOssDecoderLayer",
    "gptj": "GPTJBlock",
    "granite": "GraniteDecoderLayer",
    "granitemoe": "GraniteMoeDecoderLayer",
    "kimi_k2": "DeepseekV3DecoderLayer",  # kimi_k2 runs DeepSeek-V3's code
    "llama": "LlamaDecoderLayer",
    "llama4_text": "Llama4TextDecoderLayer",
    "mistral": "MistralDecoderLayer",
    "mixtral": "MixtralDecoderLayer",
    "olmo2": "Olmo2DecoderLayer",
    "olmo3": "Olmo3DecoderLayer",
    "opt": "OPTDecoderLayer",
    "phi3": "Phi3DecoderLayer",
    "qwen2": "Qwen2DecoderLayer",
    "qwen2_moe": "Qwen2MoeDecoderLayer",
    "qwen3": "Qwen3DecoderLayer",
    "qwen3_moe": "Qwen3MoeDecoderLayer",
    "qwen3_next": "Qwen3NextDecoderLayer",
    "smollm3": "SmolLM3DecoderLayer",
    "t5": "T5Block",
    # issue 25's families (transformers 5.25: the GradientCheckpointingLayer each builds)
    "cohere": "CohereDecoderLayer",
    "cohere2": "Cohere2DecoderLayer",
    "deepseek_v32": "DeepseekV32DecoderLayer",
    "deepseek_v4": "DeepseekV4DecoderLayer",
    "ernie4_5": "Ernie4_5DecoderLayer",
    "ernie4_5_moe": "Ernie4_5_MoeDecoderLayer",
    "exaone4": "Exaone4DecoderLayer",
    "ministral3": "Ministral3DecoderLayer",
    "olmoe": "OlmoeDecoderLayer",
    "phi": "PhiDecoderLayer",
    "qwen3_5_moe_text": "Qwen3_5MoeDecoderLayer",
    "qwen3_5_text": "Qwen3_5DecoderLayer",
    "qwen3_vl_moe_text": "Qwen3VLMoeTextDecoderLayer",
    "qwen3_vl_text": "Qwen3VLTextDecoderLayer",
    "seed_oss": "SeedOssDecoderLayer",
    "starcoder2": "Starcoder2DecoderLayer",
}
# Accelerate's mixed_precision is autocast over fp32 parameters, which is how zeroplan.engines.storage counts
# bf16-mixed and fp16-mixed; bf16-true (no fp32 master) is a model loaded in bf16 with mixed_precision 'no'.
MIXED_PRECISION = {Precision.bf16_mixed: "bf16", Precision.fp16_mixed: "fp16", Precision.bf16_true: "no",
                   Precision.fp32: "no"}
FSDP_VERSION = {Engine.fsdp: 1, Engine.fsdp2: 2}
BACKWARD_PREFETCH = "BACKWARD_PRE"  # what zeroplan.engines.fsdp models for FSDP1 (two blocks gathered)


def layer_class(family: str | None) -> str | None:
    """The block class Accelerate's TRANSFORMER_BASED_WRAP wraps for an HF model_type (a multimodal one's: its
    language model's); None when unknown."""
    from zeroplan.models.families import TEXT_MODEL_TYPES

    return LAYER_CLASSES.get(TEXT_MODEL_TYPES.get(family, family)) if family else None


def _fsdp_config(advice: Advice) -> tuple[dict, list[str]]:
    rec, arch = advice.recommendation, advice.scenario.arch
    settings, notes = strategy_settings(rec.engine, rec.stage), []
    fsdp: dict = {"fsdp_version": FSDP_VERSION[rec.engine]}
    if rec.engine is Engine.fsdp:
        fsdp["fsdp_sharding_strategy"] = settings["sharding_strategy"]
        fsdp["fsdp_backward_prefetch"] = BACKWARD_PREFETCH
    else:
        fsdp["fsdp_reshard_after_forward"] = settings["reshard_after_forward"]
    fsdp["fsdp_auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
    cls = layer_class(arch.family if arch else None)
    if cls:
        fsdp["fsdp_transformer_layer_cls_to_wrap"] = cls
    else:
        notes.append("block class unknown for this model: Accelerate falls back to the model's _no_split_modules; "
                     "set fsdp_transformer_layer_cls_to_wrap to its decoder layer class")
    fsdp["fsdp_activation_checkpointing"] = rec.checkpointing is not Checkpointing.none
    if rec.checkpointing in (Checkpointing.selective, Checkpointing.selective_op):
        notes.append("fsdp_activation_checkpointing recomputes whole blocks (full checkpointing): less memory than "
                     f"the {rec.checkpointing.value} checkpointing planned, more compute")
    fsdp["fsdp_offload_params"] = False  # offload is not modelled for PyTorch engines
    return fsdp, notes


def _ddp_notes(advice: Advice) -> list[str]:
    rec = advice.recommendation
    notes = [f"gradient_as_bucket_view={rec.engine_settings['gradient_as_bucket_view']} as planned: Accelerate's "
             "file has no key for it; pass DistributedDataParallelKwargs(gradient_as_bucket_view=...) to "
             "Accelerator(kwargs_handlers=[...])"]
    if rec.engine_settings["zero_redundancy_optimizer"]:
        notes.append("construct torch.distributed.optim.ZeroRedundancyOptimizer(model.parameters(), "
                     "optimizer_class=torch.optim.AdamW, ...) in the training script: the config cannot select it")
    if rec.checkpointing is not Checkpointing.none:
        notes.append(f"turn on {rec.checkpointing.value} activation checkpointing in the training script (e.g. "
                     "model.gradient_checkpointing_enable()): MULTI_GPU has no key for it")
    return notes


def accelerate_config(advice: Advice) -> tuple[dict, tuple[str, ...]]:
    """(the Accelerate config mapping, notes for what it cannot say) for a fitting fsdp/fsdp2/ddp recommendation.

    UsageError for a DeepSpeed recommendation (use deepspeed_config); ZeroplanError when nothing fits.
    """
    rec = advice.recommendation
    if rec.engine is Engine.deepspeed:
        raise UsageError("--emit-accelerate writes the config of a PyTorch engine (--engine fsdp, fsdp2 or ddp); "
                         "for DeepSpeed use --emit-deepspeed PATH")
    if not rec.fits:
        raise ZeroplanError(f"nothing to emit: {rec.summary}" + (f"; {rec.change.description}" if rec.change else ""))
    precision = advice.scenario.setup.precision
    kind = {Engine.ddp: "MULTI_GPU", Engine.none: "NO"}.get(rec.engine, "FSDP")  # NO: Accelerate's one device
    config: dict = {"compute_environment": "LOCAL_MACHINE", "distributed_type": kind,
                    "mixed_precision": MIXED_PRECISION[precision]}
    if rec.engine is Engine.none:
        notes = [f"turn on {rec.checkpointing.value} activation checkpointing in the training script"] if (
            rec.checkpointing is not Checkpointing.none) else []
    elif rec.engine is Engine.ddp:
        notes = _ddp_notes(advice)
    else:
        config["fsdp_config"], notes = _fsdp_config(advice)
    config.update(num_machines=rec.nodes, num_processes=rec.gpus, machine_rank=0)
    if precision is Precision.bf16_true:
        notes.append("bf16-true: load the model in bf16 (torch_dtype=torch.bfloat16); mixed_precision 'no' keeps it so")
    if rec.nodes > 1:
        notes.append("multi-node: set machine_rank on each node, and main_process_ip / main_process_port")
    notes.append(f"micro-batch {rec.micro_batch} x gradient accumulation {rec.grad_accum} per GPU: set them in the "
                 "training script (Accelerator(gradient_accumulation_steps=...))")
    return config, tuple(notes)
