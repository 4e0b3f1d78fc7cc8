"""The families zeroplan reads, in words: README's "What is modelled" sentence, generated from the registry.

tests/test_families_readme.py holds README.md to `readme_sentence()` and every model_type zeroplan reads to a name
here. Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.models.families import _WHERE, MULTIMODAL_TYPES

# model_type -> the name its publisher gives the family. Types that only a multimodal config's text_config names
# (qwen3_vl_text, ...) are read through their outer type and are listed with it.
DISPLAY_NAMES: dict[str, str] = {
    "gpt2": "GPT-2", "gpt_neox": "GPT-NeoX", "opt": "OPT", "bloom": "BLOOM", "falcon": "Falcon",
    "gptj": "GPT-J", "llama": "Llama 1-3.x", "mistral": "Mistral", "mixtral": "Mixtral", "qwen2": "Qwen2/2.5",
    "qwen3": "Qwen3", "gemma": "Gemma", "gemma2": "Gemma 2", "gemma3_text": "Gemma 3", "gemma4_text": "Gemma 4",
    "phi": "Phi-1/1.5/2",
    "phi3": "Phi-3/4", "t5": "T5", "glm4": "GLM-4", "olmo2": "OLMo 2", "olmo3": "OLMo 3", "granite": "Granite",
    "smollm3": "SmolLM3", "seed_oss": "Seed-OSS", "ernie4_5": "ERNIE 4.5", "ministral3": "Ministral 3",
    "exaone4": "EXAONE 4.0", "starcoder2": "StarCoder2", "cohere": "Cohere Command R",
    "cohere2": "Cohere 2 (Command R7B, A)", "qwen2_moe": "Qwen1.5/2-MoE", "qwen3_moe": "Qwen3-MoE",
    "qwen3_next": "Qwen3-Next", "llama4_text": "Llama 4", "deepseek_v2": "DeepSeek-V2", "deepseek_v3": "DeepSeek-V3",
    "deepseek_v32": "DeepSeek-V3.2", "deepseek_v4": "DeepSeek-V4",
    "kimi_k2": "Kimi K2", "glm4_moe": "GLM-4.5", "gpt_oss": "gpt-oss", "granitemoe": "Granite-MoE",
    "olmoe": "OLMoE", "ernie4_5_moe": "ERNIE 4.5 MoE",
    # multimodal configs, read through their language model
    "gemma3": "Gemma 3", "gemma4": "Gemma 4", "llama4": "Llama 4", "mistral3": "Mistral 3 / Ministral 3",
    "qwen3_vl": "Qwen3-VL",
    "qwen3_vl_moe": "Qwen3-VL-MoE", "qwen3_5": "Qwen3.5", "qwen3_5_moe": "Qwen3.5-MoE",
}
TEXT_ONLY_VIA_OUTER = frozenset({"qwen3_vl_text", "qwen3_vl_moe_text", "qwen3_5_text", "qwen3_5_moe_text"})


def _listed(types: list[str]) -> str:
    return ", ".join(f"{DISPLAY_NAMES[t]} (`{t}`)" for t in types)


def readme_sentence() -> str:
    """The README sentence naming every family zeroplan reads, from the registry (families._WHERE)."""
    text = [t for t in _WHERE if t not in MULTIMODAL_TYPES and t not in TEXT_ONLY_VIA_OUTER]
    return (f"Exact parameter counts, without torch, for {len(text)} language-model families: {_listed(text)}; and "
            f"the language model of {len(MULTIMODAL_TYPES)} vision-language configs (the vision tower not counted, "
            f"and said): {_listed(list(MULTIMODAL_TYPES))}.")
