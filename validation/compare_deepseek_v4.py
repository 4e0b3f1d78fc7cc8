"""Compare zeroplan's DeepSeek-V4 activation formula with the measured data; regenerate its docs table.

    python validation/compare_deepseek_v4.py              # summary on stdout; exit 1 past LABELS_SLACK bytes
    python validation/compare_deepseek_v4.py --write-docs # also rewrite the table in docs/activations.md

Torch-free: reads validation/activations_deepseek_v4.json (validation/measure_deepseek_v4.py, which needs torch).
Rows of weights "cast" (every parameter in the compute dtype, zeroplan's assumption) are held to zeroplan's figure;
rows of weights "loaded" (transformers' fp32 modules kept) to it plus loaded_delta, the difference docs/activations.md
states. Each measured config is read by zeroplan's own reader (models/families/deepseek_v4.py), so the Architecture held
to the measurement is the one a user's config.json gets.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zeroplan.memory.activations import ActivationEstimate, activation_bytes
from zeroplan.memory.activations.deepseek_v4 import windows
from zeroplan.memory.activations.ops import FP32_BYTES
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
from zeroplan.models.families import parse_family_config

DATA = json.loads((Path(__file__).resolve().parent / "activations_deepseek_v4.json").read_text())
DOCS = Path(__file__).resolve().parents[1] / "docs" / "activations.md"
BEGIN = "<!-- BEGIN deepseek_v4 (validation/compare_deepseek_v4.py --write-docs) -->"
END = "<!-- END deepseek_v4 -->"
PRECISION = {"bf16": Precision.bf16_mixed, "fp32": Precision.fp32}
# Beyond the layers: transformers' ForCausalLMLoss pads the labels by one column before shifting (loss_utils.py)
# and keeps a 0-d fp32 result; zeroplan's loss term counts 8 T bytes of labels, as for every family (measured: 4
# to 12 bytes under).
LABELS_SLACK = 16
HYPER_CONNECTIONS = 2  # attn_hc and ffn_hc per layer


def architecture(case: str):
    return parse_family_config(dict(DATA["configs"][case]), strict=False).architecture()


def estimate(row: dict) -> ActivationEstimate:
    setup = TrainingSetup(precision=PRECISION[row["dtype"]], seq_len=row["seq_len"], micro_batch=row["micro_batch"],
                          checkpointing=Checkpointing(row["checkpointing"]), attention=Attention.eager)
    return activation_bytes(architecture(row["case"]), setup)


def loaded_delta(row: dict) -> tuple[int, tuple[int, ...]]:
    """What weights kept fp32 as transformers loads them (no engine cast) keep beyond zeroplan's cast figure: (the
    whole, each layer's). 16-bit only: the fp32 sinks make the core's logits fp32, so its softmax keeps 4 bytes an
    element instead of e and p v reads its cast (e b a s L); fn.float() and the head's hc_fn / hc_scale .float() are
    the parameters themselves, no copies (memory/activations/deepseek_v4.py counts those copies)."""
    arch, e, b, s = architecture(row["case"]), PRECISION[row["dtype"]].compute_bytes, row["micro_batch"], row["seq_len"]
    if e == FP32_BYTES:
        return 0, (0,) * arch.num_layers
    n, h, a = arch.hc_mult, arch.hidden_size, arch.num_attention_heads
    each = []
    for kind in arch.attention_types:
        keys = s + windows(replace(arch, attention_types=(kind,)), s)
        core = (FP32_BYTES - e) * b * a * s * (keys + 1) + e * b * a * s * keys
        each.append(core - HYPER_CONNECTIONS * FP32_BYTES * (2 + n) * n * n * h)
    return sum(each) - FP32_BYTES * (n * n * h + 1), tuple(each)


def compared() -> list[tuple[dict, int, int, tuple[int, ...]]]:
    """(row, measured total, zeroplan's total, zeroplan's layers) for every measured case; a loaded row's figure
    is the cast one plus loaded_delta (docs/activations.md)."""
    out = []
    for r in DATA["cases"]:
        acts = estimate(r)
        total, layers = acts.total_bytes, acts.layer_bytes
        if r["weights"] == "loaded":
            extra, each = loaded_delta(r)
            total, layers = total + extra, tuple(x + y for x, y in zip(layers, each))
        out.append((r, r["total"], total, layers))
    return out


def _label(r: dict) -> str:
    return f"{r['weights']}, {r['checkpointing']}, {r['dtype']}, b={r['micro_batch']}, s={r['seq_len']}"


def summary() -> tuple[str, int]:
    """The table by config and weights, and the largest shortfall in bytes."""
    lines = ["| config | weights | cases | max abs error | worst case | layers exact (no checkpointing) |",
             "|---|---|---:|---:|---|---|"]
    worst_all = 0
    rows = compared()
    for case in DATA["configs"]:
        for weights in ("cast", "loaded"):
            mine = [x for x in rows if x[0]["case"] == case and x[0]["weights"] == weights]
            r, m, p, _ = max(mine, key=lambda x: abs(x[2] - x[1]))
            worst_all = max(worst_all, abs(p - m))
            exact = all(list(layers) == r["layers"] for r, _, _, layers in mine if r["checkpointing"] == "none")
            lines.append(f"| {case} | {weights} | {len(mine)} | {abs(p - m)} B ({100 * abs(p - m) / m:.4f}%) | "
                         f"{_label(r)} | {'yes' if exact else 'NO'} |")
    return "\n".join(lines), worst_all


def cases_table() -> str:
    lines = ["| config | weights | checkpointing | dtype | b | s | measured B | predicted B | error B | measured per "
             "layer B |", "|---|---|---|---|---|---|---:|---:|---:|---|"]
    for r, m, p, _ in compared():
        lines.append(f"| {r['case']} | {r['weights']} | {r['checkpointing']} | {r['dtype']} | {r['micro_batch']} | "
                     f"{r['seq_len']} | {m:,} | {p:,} | {p - m:+,} | {', '.join(f'{n:,}' for n in r['layers'])} |")
    return "\n".join(lines)


def configs_table() -> str:
    keys = ("hidden_size", "num_attention_heads", "head_dim", "q_lora_rank", "hc_mult", "hc_sinkhorn_iters",
            "o_groups", "o_lora_rank", "partial_rotary_factor", "layer_types", "compress_rates", "index_n_heads",
            "index_head_dim", "index_topk", "n_routed_experts", "num_experts_per_tok", "scoring_func")
    lines = ["| config | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for case, config in DATA["configs"].items():
        cells = [json.dumps(config.get(k, "default")).replace("_attention", "").replace('"', "") for k in keys]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_docs() -> None:
    table, _ = summary()
    head = (f"Generated by `python validation/compare_deepseek_v4.py --write-docs` from "
            f"validation/activations_deepseek_v4.json (torch {DATA['torch']}, transformers {DATA['transformers']}); "
            f"{len(DATA['cases'])} cases.\n\n")
    body = (f"{BEGIN}\n{head}{configs_table()}\n\n{table}\n\n<details><summary>All cases</summary>\n\n{cases_table()}"
            f"\n\n</details>\n{END}")
    text = DOCS.read_text()
    DOCS.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: body, text, flags=re.DOTALL))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    table, worst = summary()
    print(table)
    print(f"\n{len(DATA['cases'])} cases; worst error {worst} B")
    if args.write_docs:
        write_docs()
    return 0 if worst <= LABELS_SLACK else 1


if __name__ == "__main__":
    raise SystemExit(main())
