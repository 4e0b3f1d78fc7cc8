"""One gated delta net (Qwen3.5's, Qwen3-Next's; transformers' torch path) alone: saved bytes against the formula.

    python validation/measure_delta_net.py   # writes validation/delta_net_measured.json, prints the docs table

The whole-model grid (validation/measure_new_families.py) runs s = 32 and 64: one chunk of 64. This runs the
modules Qwen3_5GatedDeltaNet and Qwen3NextGatedDeltaNet (transformers==5.25.0: models/qwen3_5/modeling_qwen3_5.py,
models/qwen3_next/modeling_qwen3_next.py) on s up to 200, 1 to 4 chunks, and sums the storages autograd saves (saved_tensors_hooks; parameters and the input left out), as
zeroplan.memory.activations.gated_delta.delta_net_terms counts them. Storages are told apart by address: the
CPU allocator may hand a saved tensor the address of one freed before it (the discarded final state's graph),
so a measured figure can fall a few KiB under the formula (never above it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import Qwen3_5TextConfig, Qwen3NextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from validation.compare_new_families import ARCHS  # noqa: E402
from zeroplan.memory.activations.gated_delta import delta_net_terms  # noqa: E402

CONFIG = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
              layer_types=["linear_attention", "full_attention"], vocab_size=100, intermediate_size=128)
OUT = Path(__file__).resolve().parent / "delta_net_measured.json"
CASES = [(b, s) for b in (1, 2) for s in (32, 64, 130, 200)]
# Qwen3-Next's module fuses the projections (in_proj_qkvz, in_proj_ba) and concatenates q, k, v for the conv;
# what it saves has the same sizes
MODULES = {"qwen3_5": (Qwen3_5TextConfig, Qwen3_5GatedDeltaNet), "qwen3_next": (Qwen3NextConfig, Qwen3NextGatedDeltaNet)}
DTYPES = {"bf16": (torch.bfloat16, 2), "fp32": (torch.float32, 4)}


def saved_bytes(module: str, dtype: torch.dtype, b: int, s: int) -> int:
    torch.manual_seed(0)
    config, net = MODULES[module]
    layer = net(config(**CONFIG), 0).to(dtype)
    x = torch.randn(b, s, CONFIG["hidden_size"], dtype=dtype, requires_grad=True)
    skip = {p.untyped_storage().data_ptr() for p in layer.parameters()} | {x.untyped_storage().data_ptr()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            seen.setdefault(ptr, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x)
    del out
    return sum(seen.values())


def main() -> int:
    torch.set_num_threads(2)
    arch = ARCHS["qwen3_5_text"]
    rows = []
    print("| module | dtype | b | s | chunks | measured B | formula B | error |\n|---|---|---|---|---|---:|---:|---:|")
    for module in MODULES:
        for name, (dtype, e) in DTYPES.items():
            for b, s in CASES:
                measured = saved_bytes(module, dtype, b, s)
                rows.append({"module": module, "dtype": name, "micro_batch": b, "seq_len": s, "measured": measured})
                formula = sum(v for _, v in delta_net_terms(arch, b, s, e))
                print(f"| {module} | {name} | {b} | {s} | {-(-s // 64)} | {measured:,} | {formula:,} | "
                      f"{100 * (formula - measured) / measured:+.2f}% |")
    OUT.write_text(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                               "config": CONFIG, "cases": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
