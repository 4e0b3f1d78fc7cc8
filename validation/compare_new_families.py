"""Compare zeroplan's activation figure for the 2025-26 families with the measured data; regenerate their docs table.

    python validation/compare_new_families.py              # summary on stdout; exit 1 past the 2% bar
    python validation/compare_new_families.py --write-docs # also rewrite the table in docs/activations.md

Torch-free: reads validation/activations_new_families.json (written by validation/measure_new_families.py, which
needs torch). Each family's Architecture is written here from the same config dict; where zeroplan has a reader
for the family, tests/test_activations_new_families.py holds the reader's Architecture to this one.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
from zeroplan.models.architecture import Architecture
from zeroplan.models.families import parse_family_config

DATA = json.loads((Path(__file__).resolve().parent / "activations_new_families.json").read_text())
DOCS = Path(__file__).resolve().parents[1] / "docs" / "activations.md"
BEGIN = "<!-- BEGIN new families (validation/compare_new_families.py --write-docs) -->"
END = "<!-- END new families -->"
TOLERANCE = 0.02  # issue 13: within 2% of every measured case

_BASE = dict(hidden_size=64, num_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=128, vocab_size=1000, gated_mlp=True, norm="rmsnorm", tie_word_embeddings=False,
             hidden_act="silu")
ARCHS: dict[str, Architecture] = {
    "qwen3": Architecture(family="qwen3", qk_norm="head", **_BASE),
    "olmo2": Architecture(family="olmo2", qk_norm="full", **_BASE),
    "smollm3": Architecture(family="smollm3", no_rope_layers=(1,), **_BASE | dict(tie_word_embeddings=True)),
    "gemma3_text": Architecture(family="gemma3_text", qk_norm="head", norms_per_layer=4, sliding_window=16,
                                attention_types=("sliding_attention", "full_attention"),
                                **_BASE | dict(tie_word_embeddings=True, hidden_act="gelu_pytorch_tanh")),
    "qwen3_moe": Architecture(family="qwen3_moe", qk_norm="head", num_experts=4, num_experts_per_tok=2,
                              router_norm_topk=False,
                              **_BASE | dict(intermediate_size=32)),
    "glm4_moe": Architecture(family="glm4_moe", num_experts=4, num_experts_per_tok=2, mlp_types=("dense", "moe"),
                             dense_intermediate_size=128, shared_expert_intermediate_size=32,
                             **_BASE | dict(intermediate_size=32)),
    "deepseek_v3": Architecture(family="deepseek_v3", num_experts=4, num_experts_per_tok=2, mlp_types=("dense", "moe"),
                                dense_intermediate_size=128, shared_expert_intermediate_size=32, q_lora_rank=32,
                                kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=24,
                                **_BASE | dict(intermediate_size=32, num_key_value_heads=4, head_dim=24)),
    "deepseek_v3-narrow-v": Architecture(family="deepseek_v3", num_experts=4, num_experts_per_tok=2,
                                         shared_expert_intermediate_size=64, kv_lora_rank=16, qk_nope_head_dim=16,
                                         qk_rope_head_dim=8, v_head_dim=16,
                                         **_BASE | dict(intermediate_size=32, num_key_value_heads=4, head_dim=24)),
    "gpt_oss": Architecture(family="gpt_oss", num_experts=4, num_experts_per_tok=2, attention_sinks=True,
                            sliding_window=16, attention_types=("sliding_attention", "full_attention"),
                            **_BASE | dict(intermediate_size=32)),
    "llama4_text": Architecture(family="llama4_text", num_experts=4, num_experts_per_tok=1, qk_norm="head",
                                mlp_types=("dense", "moe"), dense_intermediate_size=128,
                                shared_expert_intermediate_size=32, attention_chunk_size=16, no_rope_layers=(1,),
                                attention_types=("chunked_attention", "full_attention"),
                                **_BASE | dict(intermediate_size=32)),
}
# Issue 25's families (validation/measure_new_families.py's configs of the same names).
_LINEAR = dict(attention_types=("linear_attention", "full_attention"), qk_norm="head", attention_output_gate=True,
               linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
               linear_conv_kernel_dim=4)
_TYPED = dict(sliding_window=16, attention_types=("sliding_attention", "full_attention"))
_PARALLEL = dict(norm="layernorm", norms_per_layer=1, parallel_attn=True)
ARCHS |= {
    "seed_oss": Architecture(family="seed_oss", dropout=0.1, **_BASE),
    "ernie4_5": Architecture(family="ernie4_5", **_BASE | dict(tie_word_embeddings=True)),
    "ministral3": Architecture(family="ministral3", **_BASE),
    "exaone4": Architecture(family="exaone4", qk_norm="head", no_rope_layers=(1,), **_TYPED, **_BASE),
    "starcoder2": Architecture(family="starcoder2", **_BASE | dict(gated_mlp=False, norm="layernorm",
                                                                   tie_word_embeddings=True,
                                                                   hidden_act="gelu_pytorch_tanh")),
    "phi": Architecture(family="phi", **_BASE | _PARALLEL | dict(gated_mlp=False, hidden_act="gelu_new")),
    "cohere": Architecture(family="cohere", **_BASE | _PARALLEL | dict(tie_word_embeddings=True)),
    "cohere2": Architecture(family="cohere2", no_rope_layers=(1,), **_TYPED,
                            **_BASE | _PARALLEL | dict(tie_word_embeddings=True)),
    "olmoe": Architecture(family="olmoe", qk_norm="full", num_experts=4, num_experts_per_tok=2, router_norm_topk=False,
                          **_BASE | dict(intermediate_size=32)),
    "ernie4_5_moe": Architecture(family="ernie4_5_moe", num_experts=4, num_experts_per_tok=2,
                                 mlp_types=("dense", "moe"),
                                 dense_intermediate_size=128, shared_expert_intermediate_size=32,
                                 **_BASE | dict(intermediate_size=32, tie_word_embeddings=True)),
    "qwen3_5_text": Architecture(family="qwen3_5_text", **_LINEAR, **_BASE),
    "qwen3_5_moe_text": Architecture(family="qwen3_5_moe_text", num_experts=4, num_experts_per_tok=2,
                                     shared_expert_intermediate_size=48, shared_expert_gate=True, **_LINEAR,
                                     **_BASE | dict(intermediate_size=32)),
    "deepseek_v32": replace(ARCHS["deepseek_v3"], family="deepseek_v32"),
    "qwen3_vl": Architecture(family="qwen3_vl", qk_norm="head", **_BASE),
    "qwen3_vl_moe": Architecture(family="qwen3_vl_moe", qk_norm="head", num_experts=4, num_experts_per_tok=2,
                                 **_BASE | dict(intermediate_size=32)),
}
# Gemma 4's language model: read from the measured config by zeroplan's reader (its Architecture carries the global
# layers' widths, kv sharing and per-layer inputs, which a hand-written one would only repeat).
ARCHS |= {name: parse_family_config(dict(DATA["configs"][name]), strict=False).architecture()
          for name in ("gemma4_text", "gemma4_text-k-eq-v", "gemma4_text-moe")}
# Families whose formula does not yet meet the 2% bar: the worst error each stays under, and why. A family here must miss the bar
# somewhere (tests/test_activations_new_families.py), so a fixed gap cannot stay listed.
KNOWN_GAPS: dict[str, tuple[float, str]] = {
    "phi": (0.03, "SDPA with the partial rotary (partial_rotary_factor 0.5): q and k split, rotated and concatenated "
                  "save more than the formula's full-width rotary"),
}
# Llama 4 has no FlashAttention path: on a GPU too it runs SDPA with its chunked mask, which the measurement keeps.
SDPA_KEEPS_MASKS = frozenset({"llama4_text"})
SETUP = {"bf16": Precision.bf16_mixed, "fp32": Precision.fp32}
ATTENTION = {"eager": Attention.eager, "sdpa": Attention.flash}


def predicted(arch: Architecture, row: dict) -> int:
    setup = TrainingSetup(precision=SETUP[row["dtype"]], seq_len=row["seq_len"], micro_batch=row["micro_batch"],
                          checkpointing=Checkpointing(row["checkpointing"]), attention=ATTENTION[row["attention"]])
    return activation_bytes(arch, setup).total_bytes


def compared(family: str) -> list[tuple[dict, int, int]]:
    """(row, measured, predicted); measured leaves out the SDPA masks a FlashAttention kernel does not keep."""
    rows = [r for r in DATA["cases"] if r["family"] == family]
    fa2 = family not in SDPA_KEEPS_MASKS
    return [(r, r["total"] - (r["masks"] if r["attention"] == "sdpa" and fa2 else 0), predicted(ARCHS[family], r))
            for r in rows]


def error(measured: int, predicted_: int) -> float:
    return (predicted_ - measured) / measured


def summary() -> tuple[str, float]:
    """The table, and the worst error among the families held to the 2% bar (KNOWN_GAPS apart)."""
    lines = ["| family | cases | max abs error | worst case | known gap |", "|---|---:|---:|---|---|"]
    worst_all = 0.0
    for family in ARCHS:
        rows = compared(family)
        row, m, p = max(rows, key=lambda r: abs(error(r[1], r[2])))
        if family not in KNOWN_GAPS:
            worst_all = max(worst_all, abs(error(m, p)))
        gap = KNOWN_GAPS[family][1] if family in KNOWN_GAPS else ""
        lines.append(f"| {family} | {len(rows)} | {100 * abs(error(m, p)):.3f}% | {row['attention']}, "
                     f"{row['checkpointing']}, {row['dtype']}, b={row['micro_batch']}, s={row['seq_len']} | {gap} |")
    return "\n".join(lines), worst_all


def cases_table() -> str:
    lines = ["| family | attention | checkpointing | dtype | b | s | measured B | predicted B | error | routing (tokens per "
             "expert, per MoE layer) |", "|---|---|---|---|---|---|---:|---:|---:|---|"]
    for family in ARCHS:
        for r, m, p in compared(family):
            routing = "; ".join(",".join(map(str, layer)) for layer in r["routing"]) or "-"
            lines.append(f"| {family} | {r['attention']} | {r['checkpointing']} | {r['dtype']} | {r['micro_batch']} | "
                         f"{r['seq_len']} | {m:,} | {p:,} | {100 * error(m, p):+.3f}% | {routing} |")
    return "\n".join(lines)


def write_docs() -> None:
    table, _ = summary()
    head = (f"Generated by `python validation/compare_new_families.py --write-docs` from "
            f"validation/activations_new_families.json (torch {DATA['torch']}, transformers {DATA['transformers']}); "
            f"{len(DATA['cases'])} cases.\n\n")
    body = f"{BEGIN}\n{head}{table}\n\n<details><summary>All cases</summary>\n\n{cases_table()}\n\n</details>\n{END}"
    text = DOCS.read_text()
    DOCS.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: body, text, flags=re.DOTALL))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    table, worst = summary()
    print(table)
    print(f"\n{len(DATA['cases'])} cases; worst error {100 * worst:.3f}%")
    if args.write_docs:
        write_docs()
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
