"""Measure what torch.compile (inductor) saves for backward per Llama-style block, against eager PyTorch.

Builds tiny Llama / Qwen3 / Mistral decoders from transformers (random weights, bf16, sdpa attention, one or two
layers), wraps each decoder layer as torchtitan and torchtune apply compile (torch.compile of each block,
backend="inductor"), and counts the bytes of the distinct storages the block's backward holds: every tensor passed
to autograd's pack hook (torch.autograd.graph.saved_tensors_hooks) while the block's forward runs -- eager's
saved tensors, or the ones AOTAutograd's min-cut partitioner hands its compiled backward -- parameters excluded.
Same shapes, same inputs, eager then compiled. Writes validation/compile_measured.json.
Needs torch (torch==2.13.0 here, CPU) and transformers: python validation/measure_compile.py
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [  # (family, hidden, heads, kv_heads, intermediate, seq, batch)
    ("llama", 256, 4, 4, 688, 128, 2),
    ("llama", 256, 4, 2, 688, 256, 1),
    ("llama", 512, 8, 2, 1376, 128, 2),
    ("qwen3", 256, 4, 2, 768, 128, 2),
    ("mistral", 384, 6, 2, 1024, 128, 2),
]


def _config(family: str, hidden: int, heads: int, kv: int, inter: int):
    from transformers import AutoConfig

    return AutoConfig.for_model(family, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
                                intermediate_size=inter, num_hidden_layers=1, vocab_size=256,
                                head_dim=hidden // heads, attn_implementation="sdpa")  # fmt: skip


def _counted(run, params):
    """A module standing in for one decoder layer: counts the storages its forward saves for backward."""
    import torch

    class Counted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bytes = 0

        def forward(self, *args, **kwargs):
            return _count(self, run, params, args, kwargs)

    return Counted()


def _count(self, run, params, args, kwargs):
    import torch

    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run(*args, **kwargs)
    self.bytes = sum(seen.values())
    return out


def measure(shape: tuple, prepare=None) -> dict:
    """Saved bytes of layer 0, eager and compiled; `prepare(layer)` converts it first (measure_float8.py's linears)."""
    import torch
    from transformers import AutoModelForCausalLM

    family, hidden, heads, kv, inter, seq, batch = shape
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(family, hidden, heads, kv, inter)).to(torch.bfloat16)
    layer = model.model.layers[0]
    if prepare is not None:
        prepare(layer)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(0, 256, (batch, seq))
    row = {"family": family, "hidden": hidden, "heads": heads, "kv_heads": kv, "intermediate": inter,
           "seq": seq, "batch": batch}  # fmt: skip
    for name, run in (("eager", layer.forward), ("compiled", torch.compile(layer, backend="inductor"))):
        counted = _counted(run, params)
        model.model.layers[0] = counted
        for _ in range(2):  # the first compiled call compiles; count the second
            model(input_ids=ids).logits.float().sum().backward()
        row[f"{name}_bytes"] = counted.bytes
        model.model.layers[0] = layer
    row["compiled_over_eager"] = round(row["compiled_bytes"] / row["eager_bytes"], 4)
    return row


def main() -> None:
    import torch
    import transformers

    rows = []
    for shape in SHAPES:
        rows.append(measure(shape))
        print(rows[-1], flush=True)
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "cpu",
           "dtype": "bfloat16", "rows": rows}  # fmt: skip
    (ROOT / "validation" / "compile_measured.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
