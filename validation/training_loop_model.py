"""The measured model of validation/measure_training_loop.py as zeroplan sees it (torch-free: the tests import it).

The harness's small GPT (fused qkv, LLaMAMLP, untied head, LoRA with dropout on every linear and the head) is, for
what a loop carries, a Llama: the same linear inputs in the same order, the embedding and the norms frozen.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

RANK, DROPOUT = 4, 0.05
HEADS = 4


def zeroplan_carried(row: dict) -> int:
    """zeroplan's carried bytes for the measured model, described as a Llama config (tests/test_training_loop.py)."""
    from zeroplan.api import estimate

    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": row["hidden"],
              "intermediate_size": row["intermediate"], "num_hidden_layers": row["layers"], "num_attention_heads": HEADS,
              "num_key_value_heads": HEADS, "vocab_size": row["vocab"], "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "bfloat16"}
    quant = {"qlora": True, "qlora_stack": "litgpt", "bnb_version": "0.42.0"} if row["four_bit"] else {
        "adapter_dtype": "base"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config))
        est = estimate(model=str(path), gpus=1, hardware=None, engine="none", stage=0, precision="bf16-true",
                       seq_len=row["seq"], micro_batch=row["micro_batch"], lora_rank=RANK, lora_dropout=DROPOUT,
                       lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head",
                       training_loop="litgpt", **quant)
    return est.activations.carried_bytes
