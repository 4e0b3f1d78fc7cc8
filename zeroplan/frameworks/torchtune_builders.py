"""torchtune model builders whose shapes are a zeroplan preset's, beyond frameworks/torchtune.py's first table.

Each builder states its vocabulary, layers, heads, KV heads, width and MLP width (and, where it sets them, head_dim
and tie_word_embeddings) in pytorch/torchtune@bd2a0fc:torchtune/models/*/_model_builders.py; a builder is listed here
only where every one of those equals the preset's (validation/hf_reference/presets/torchtune_builders.json, read from
those files by validation/hf_reference/torchtune_builders.py; tests/test_presets_hf.py holds each row to its preset).
A builder's -base and -instruct forms differ only in max_seq_len, which holds no parameter. Vision builders
(llama3_2_vision_*) are absent: their text decoder adds cross-attention layers no preset has, so they stay refused.
phi3_mini is absent though its totals are phi-3-mini's: torchtune splits Phi-3's fused qkv_proj and gate_up_proj into
q/k/v and w1/w3 (torchtune/models/phi3/_convert_weights.py), so its LoRA targets are linears the Hugging Face model
zeroplan counts does not have.
Pure: no I/O.
"""

from __future__ import annotations

SAME_SHAPE_BUILDERS = {
    "llama3_2_1b": "llama-3.2-1b", "llama3_2_3b": "llama-3.2-3b",
    "llama2_13b": "llama-2-13b", "llama2_70b": "llama-2-70b",
    "qwen2_5_0_5b": "qwen2.5-0.5b", "qwen2_5_1_5b_base": "qwen2.5-1.5b", "qwen2_5_1_5b_instruct": "qwen2.5-1.5b",
    "qwen2_5_3b": "qwen2.5-3b", "qwen2_5_14b_base": "qwen2.5-14b", "qwen2_5_14b_instruct": "qwen2.5-14b",
    "qwen2_5_32b_base": "qwen2.5-32b", "qwen2_5_32b_instruct": "qwen2.5-32b", "qwen2_5_72b_base": "qwen2.5-72b",
    # Qwen2's 0.5B, 1.5B and 7B have Qwen2.5's shapes (validation/hf_reference/presets: the Qwen2 configs' counts)
    "qwen2_0_5b": "qwen2.5-0.5b", "qwen2_1_5b": "qwen2.5-1.5b", "qwen2_7b": "qwen2.5-7b",
    "qwen3_0_6b_base": "qwen3-0.6b", "qwen3_0_6b_instruct": "qwen3-0.6b",
    "qwen3_1_7b_base": "qwen3-1.7b", "qwen3_1_7b_instruct": "qwen3-1.7b",
    "qwen3_4b_base": "qwen3-4b", "qwen3_4b_instruct": "qwen3-4b",
    "qwen3_14b_base": "qwen3-14b", "qwen3_14b_instruct": "qwen3-14b",
    "gemma_2b": "gemma-2b",
}  # fmt: skip
