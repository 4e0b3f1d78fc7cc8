"""peft's default LoRA targets per model family: what `LoraConfig(target_modules=None)` adapts.

peft==0.21.2:peft/tuners/lora/model.py `_prepare_adapter_config` looks the model's `config.model_type` up in
peft==0.21.2:peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING and, for a model_type not
in it, raises "Please specify `target_modules` or `target_parameters`in `peft_config`". The table below is that
mapping's entries for the model_types zeroplan describes (zeroplan.models.families TEXT_TYPES and MULTIMODAL_TYPES:
a multimodal model's adapter targets are looked up under its outer model_type, as peft reads `model.config`), as data;
a model_type zeroplan describes that the mapping lacks (phi3, the MoE families, glm4, olmo2, granite, ...) has no
entry, as in peft. Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError

PEFT_VERSION = "0.21.2"
PEFT_LORA_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "t5": ("q", "v"),
    "gpt2": ("c_attn",),
    "bloom": ("query_key_value",),
    "opt": ("q_proj", "v_proj"),
    "gptj": ("q_proj", "v_proj"),
    "gpt_neox": ("query_key_value",),
    "llama": ("q_proj", "v_proj"),
    "falcon": ("query_key_value",),
    "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"),
    "gemma3_text": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"),
    "llama4": ("q_proj", "v_proj"),  # the multimodal Llama 4 (its text model, llama4_text, is not in the mapping)
    # the multimodal Gemma 4: a regex in peft, r".*language_model\..*\.(q_proj|v_proj)", the language model's q_proj
    # and v_proj (its text model, gemma4_text, is not in the mapping); zeroplan counts that language model only
    "gemma4": ("q_proj", "v_proj"),
}
# Entries peft writes as a regex over the whole multimodal model's module names: the names it selects.
PEFT_REGEX_TARGETS = frozenset({"gemma4"})


def peft_default_targets(family: str) -> tuple[str, ...]:
    """peft's default target_modules for `family` (a model_type); ZeroplanError with peft's own reason when it has none."""
    targets = PEFT_LORA_DEFAULT_TARGETS.get(family)
    if targets is None:
        raise ZeroplanError(f"peft {PEFT_VERSION} has no default LoRA targets for {family} (its model_type is not in "
                            "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: \"Please specify `target_modules`\"): "
                            "give --lora-targets")
    return targets
