"""Measure what each transformers activation (ACT2FN) saves for backward, per element of its input.

    python validation/measure_act_fns.py          # writes validation/act_fns_measured.json

For every name in transformers' ACT2CLS, in fp32 and bf16: the unique storages
torch.autograd.graph.saved_tensors_hooks sees when the activation runs on a non-leaf tensor, its
own parameters excluded, at two sizes; the slope is the bytes per input element, the intercept the
fixed bytes (XIELU's scalars). Also whether the saved set holds the
input and the output: an activation that saves its output shares it with the next op (the down
projection of a plain MLP, the gate product of a gated one). zeroplan's table
(zeroplan/memory/activations/traits.py, ACTIVATION_SAVES) is tested against this file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
import transformers
from transformers.activations import ACT2CLS, ACT2FN

OUT = Path(__file__).resolve().parent / "act_fns_measured.json"
SIZES = ((8, 32), (16, 64))
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def saved(name: str, dtype: torch.dtype, shape: tuple[int, int]) -> tuple[int, bool, bool]:
    act = ACT2FN[name]
    params = set()
    if isinstance(act, torch.nn.Module):
        act = act.to(dtype).train()
        params = {p.untyped_storage().data_ptr() for p in act.parameters()}
    x = torch.randn(*shape, dtype=dtype, requires_grad=True) * 1.0  # a non-leaf, as inside a model
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            kept.setdefault(ptr, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = act(x)
    return sum(kept.values()), x.untyped_storage().data_ptr() in kept, y.untyped_storage().data_ptr() in kept


def measure() -> dict:
    rows = {}
    for name in ACT2CLS:
        row = {}
        for label, dtype in DTYPES.items():
            (b1, inp, out), (b2, _, _) = (saved(name, dtype, shape) for shape in SIZES)
            n1, n2 = (a * b for a, b in SIZES)
            slope = (b2 - b1) / (n2 - n1)
            row[label] = {"bytes_per_element": slope, "fixed_bytes": b1 - round(slope * n1),
                          "saves_input": inp, "saves_output": out}
        rows[name] = row
    return {"torch": torch.__version__, "transformers": transformers.__version__, "activations": rows}


def main() -> int:
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        data = measure()
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    for name, row in data["activations"].items():
        print(f"{name:20s} " + "  ".join(f"{k}: {v['bytes_per_element']:g} B/el (+{v['fixed_bytes']} B)"
                                         f"{' out' if v['saves_output'] else ''}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
