"""Hugging Face Hub ids (`meta-llama/Llama-3.1-8B`): the shape of one. Pure: no I/O, no network, ever.

A Hub id names a preset through the preset's `hf_id` (models/presets.py resolves it offline).
"""

from __future__ import annotations

import re

# owner/name as the Hub spells a repository id: letters, digits, '-', '_' and '.'; neither part starts with '.' or '-'.
HF_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
_HF_ID = re.compile(HF_ID_PATTERN)


def is_hub_id(ref: str) -> bool:
    """Whether `ref` has the shape of a Hub repository id (it may still name a local folder)."""
    return bool(_HF_ID.match(ref)) and not ref.endswith((".yaml", ".yml", ".json"))


# The suffixes by which a Hub repository names another checkpoint of one architecture: the instruction-tuned,
# base, pre-trained, chat, SFT/DPO stages and a date (Qwen's -2507, DeepSeek's -0324). They change weights, not
# shapes: a variant's config.json keeps its base's layers, widths, heads and vocabulary (meta-llama/Llama-3.1-8B and
# -Instruct, Qwen/Qwen2.5-7B and -Instruct, google/gemma-2-9b and -it, mistralai/Mixtral-8x7B-v0.1 and
# -Instruct-v0.1 on the Hub). Quantized variants (-FP8, -AWQ, -GPTQ, -bnb-4bit) are not among them: their stored
# bytes differ.
# Qwen's -Thinking-2507 checkpoints keep their base's shapes too (Qwen/Qwen3-30B-A3B-Thinking-2507's config.json
# differs from Qwen3-30B-A3B's in max_position_embeddings and rope_theta only).
VARIANT_SUFFIX = re.compile(r"(?i)[-_](instruct|it|pt|base|chat|sft|dpo|thinking|\d{4})(?=$|[-_])")
QUANTIZED = re.compile(r"(?i)[-_](fp8|awq|gptq|bnb|int4|int8|4bit|8bit|nvfp4|mxfp4|gguf|exl2)(?=$|[-_])")
# Hub ids whose config differs from a preset's only in keys that hold no parameter (rope_scaling,
# max_position_embeddings): Llama 3 and Llama 3.1 share every shape (hidden 4096/8192, 32/80 layers, 128256 tokens);
# Llama 3.3 70B is Llama 3.1 70B's architecture (pytorch/torchtune@bd2a0fc:torchtune/models/llama3_3/_model_builders.py:
# "identical models apart from the checkpoints"); DeepSeek-R1 is trained from DeepSeek-V3-Base, its config.json
# DeepseekV3ForCausalLM with V3's shapes (https://huggingface.co/deepseek-ai/DeepSeek-R1/blob/main/config.json).
_LLAMA3 = "Llama 3, whose config differs from Llama 3.1's only in rope_scaling and max_position_embeddings, which hold no parameter"
SAME_SHAPES = {"meta-llama/meta-llama-3-8b": ("meta-llama/Llama-3.1-8B", _LLAMA3),
               "meta-llama/meta-llama-3-70b": ("meta-llama/Llama-3.1-70B", _LLAMA3),
               "meta-llama/llama-3.3-70b": ("meta-llama/Llama-3.1-70B", "Llama 3.3 70B, Llama 3.1 70B's architecture "
                                            "with other weights (torchtune's llama3_3_70b = llama3_1_70b)"),
               "deepseek-ai/deepseek-r1": ("deepseek-ai/DeepSeek-V3", "DeepSeek-R1, trained from DeepSeek-V3-Base: "
                                           "its config.json holds V3's shapes")}  # fmt: skip


# Repositories the Hub renamed and still redirects: meta-llama/Meta-Llama-3.1-8B is meta-llama/Llama-3.1-8B (the
# same config.json: ai-dynamo/aiconfigurator@095f58a vendors it as meta-llama--Meta-Llama-3.1-8B_config.json, which
# transformers counts as the llama-3.1-8b preset, validation/hf_reference/fresh/counts.json).
RENAMED = re.compile(r"^meta-llama/meta-(llama-3\.1-)")


def base_form(hub_id: str) -> tuple[str, tuple[str, ...]]:
    """(the id without its variant suffixes, lower-case; the suffixes removed): meta-llama/llama-3.1-8b for
    meta-llama/Llama-3.1-8B-Instruct, google/gemma-3-27b for google/gemma-3-27b-it."""
    owner, _, name = RENAMED.sub(r"meta-llama/\1", hub_id.lower()).partition("/")
    removed = tuple(match.group(1) for match in VARIANT_SUFFIX.finditer(name))
    return f"{owner}/{VARIANT_SUFFIX.sub('', name)}", removed


def variant_candidates(hub_id: str) -> list[tuple[str, str]]:
    """(the base form it may share with a preset's hf_id, why) for a Hub id; none for a quantized checkpoint's id."""
    if QUANTIZED.search(hub_id.partition("/")[2]):
        return []
    base, removed = base_form(hub_id)
    why = f"a variant ({', '.join(removed)}) of that checkpoint" if removed else "that checkpoint's architecture"
    found = [(base, why)]
    if (same := SAME_SHAPES.get(base)) is not None:
        found.append((base_form(same[0])[0], same[1]))
    return found


FAMILY = re.compile(r"^(?:meta-)?([a-z]+)[-_]?(\d+)")


def family_key(hub_id: str) -> tuple[str, str] | None:
    """('qwen', '3') for Qwen/Qwen3-4B-Instruct-2507, ('llama', '3') for meta-llama/Llama-3.1-8B: a name and its
    generation, by which an unknown id's did-you-mean lists the presets of its family."""
    match = FAMILY.match(hub_id.rpartition("/")[2].lower())
    return (match.group(1), match.group(2)) if match else None
