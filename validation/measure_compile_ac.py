"""Measure what a compiled block keeps under torchtitan's activation checkpointing (full and per-op selective).

torchtitan wraps each TransformerBlock in its checkpoint wrapper first, then compiles the wrapper
(pytorch/torchtitan@b5bcd76c66d0acb1a08b176d9639425bc55e0b2a: torchtitan/models/llama3/parallelize.py lines 46-55,
"turn on per-TransformerBlock compile after AC wrapping"; torchtitan/distributed/compile.py lines 62-70,
`transformer_block.compile(backend=backend, fullgraph=True)` with skip_fwd_side_effects_in_bwd_under_checkpoint;
torchtitan/distributed/activation_checkpoint.py lines 166-287: FullAC = ptd_checkpoint_wrapper(block,
preserve_rng_state=True, early_stop=False), SelectiveAC = the same with context_fn =
create_selective_checkpoint_contexts(policy), the policy reproduced by validation/measure_checkpointing.py's
torchtitan_policy). Dynamo turns the wrapper's torch.utils.checkpoint into a tagged region; AOTAutograd's min-cut
partitioner then saves what the policy marks MUST_SAVE only where the compiled backward reads it, and recomputes the
rest inside the compiled backward.

Same models, shapes and counted quantity as validation/measure_compile.py (read its docstring): transformers
decoder layers in bf16 with SDPA, the block's pack-hook storages, parameters excluded, counted on the second call.
Per shape and mode (none, full, selective-op), inductor on CPU:
  saved      the bytes the compiled block's backward receives, and each saved tensor ("shape dtype bytes");
  rng        of saved, the generator state preserve_rng_state saves (CPU: the 5056 B MT19937 state; CUDA's
             Philox seed and offset are 16 B): not an activation, reported apart;
  bwd_peak   the block's backward high-water: from the gradient of its output to that of its input, the bytes of
             its saved storages still alive plus every storage made since (aten ops through a dispatch mode, and
             inductor's own buffers through the wrapper's empty_strided_cpu), sampled at each allocation.
torchtune's arrangement (its compile_model compiles the TransformerSelfAttentionLayer inside the checkpoint wrapper,
pytorch/torchtune@0078c31b8ad014b22b8ced42659d8549e4c71552: torchtune/training/_compile.py) is not measured: on
torch==2.13.0+cpu the eager checkpoint's recompute runs the layer uncompiled and raises CheckpointError ("trying to save
more tensors during recomputation than during the original forward pass", pytorch/pytorch#166926).
Eager none and full rows (the wrapper without compile) give the same two numbers for comparison.

    python validation/measure_compile_ac.py          # writes validation/compile_ac_measured.json
    python validation/measure_compile_ac.py --table  # its table for docs/activations.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.checkpoint import create_selective_checkpoint_contexts
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from validation.measure_checkpointing import torchtitan_policy  # noqa: E402
from validation.measure_compile import ROOT, SHAPES, _config  # noqa: E402
from validation.measure_reference import LiveBytes  # noqa: E402

MODES = ("none", "full", "selective-op")
# measure_compile's shapes, plus Qwen2 (the same block with biased q/k/v projections), Granite (the same block with
# its branch outputs scaled by residual_multiplier) and a second Qwen3 / Mistral
EXTRA_SHAPES = [("qwen2", 256, 4, 2, 688, 128, 2), ("qwen3", 512, 8, 4, 1024, 64, 4), ("mistral", 256, 4, 1, 768, 256, 1),
                ("granite", 256, 4, 2, 688, 128, 2)]
OUT = ROOT / "validation" / "compile_ac_measured.json"
_ACTIVE: list[LiveBytes] = []


class _Live(LiveBytes):
    """LiveBytes that also sees inductor's buffers and lets the checkpoint's rng HOP through."""

    supports_higher_order_operators = True

    def track(self, t: torch.Tensor) -> None:
        s = t.untyped_storage()
        self.refs[s.data_ptr()] = (StorageWeakRef(s), s.nbytes())
        self.peak = max(self.peak, self.live())


def _tracking_empty_strided():
    """Inductor's CPU wrapper binds torch._C._dynamo.guards._empty_strided_cpu when its module loads (torch==2.13.0
    torch/_inductor/codegen/wrapper.py, the header): wrap it before anything compiles so its buffers are counted."""
    guards = torch._C._dynamo.guards
    made = guards._empty_strided_cpu

    def empty_strided_cpu(*args, **kwargs):
        t = made(*args, **kwargs)
        for rec in _ACTIVE:
            rec.track(t)
        return t

    guards._empty_strided_cpu = empty_strided_cpu


def _wrap(layer, mode: str):
    if mode == "none":
        return layer
    if mode == "full":
        return checkpoint_wrapper(layer, preserve_rng_state=True, early_stop=False)
    return checkpoint_wrapper(layer, context_fn=lambda: create_selective_checkpoint_contexts(torchtitan_policy()),
                              preserve_rng_state=True, early_stop=False)


class _Block(torch.nn.Module):
    """Stands in for one decoder layer: runs `run`, records its saved storages and its backward's high-water."""

    def __init__(self, run, params: set[int]):
        super().__init__()
        self.run, self.params, self.saved, self.rec, self.base, self.peak = run, params, {}, None, 0, 0

    def forward(self, *args, **kwargs):
        def pack(t):
            s = t.untyped_storage()
            if s.data_ptr() not in self.params:
                self.saved[s.data_ptr()] = (StorageWeakRef(s), s.nbytes(), list(t.shape), str(t.dtype)[6:])
            return t

        self.saved = {}
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = self.run(*args, **kwargs)
        (out[0] if isinstance(out, tuple) else out).register_hook(self._start)
        args[0].register_hook(self._stop)
        return out

    def _start(self, _grad):
        live_before = self.rec.live()
        self.rec.refs.update({k: (ref, n) for k, (ref, n, *_) in self.saved.items()})
        self.base = live_before
        self.rec.restart()

    def _stop(self, _grad):
        self.peak = self.rec.peak - self.base


def measure(shape: tuple, mode: str, backend: str | None, prepare=None) -> dict:
    """One shape under one mode; `prepare(layer)`, if given, changes the decoder layer in place before it is wrapped
    (a harness beside this one converts its linears, as torchtitan's converters run before AC and compile)."""
    family, hidden, heads, kv, inter, seq, batch = shape
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = AutoModelForCausalLM.from_config(_config(family, hidden, heads, kv, inter)).to(torch.bfloat16)
    if prepare is not None:
        prepare(model.model.layers[0])
    wrapped = _wrap(model.model.layers[0], mode)
    run = torch.compile(wrapped, backend=backend, fullgraph=True) if backend else wrapped
    block = _Block(run, {p.untyped_storage().data_ptr() for p in model.parameters()})
    model.model.layers[0] = block
    ids = torch.randint(0, 256, (batch, seq))
    for _ in range(2):  # the first call compiles; count the second
        loss = model(input_ids=ids).logits.float().sum()
        block.rec = _Live(*model.parameters())
        _ACTIVE.append(block.rec)
        with block.rec:
            loss.backward()
        _ACTIVE.clear()
        model.zero_grad(set_to_none=True)
    tensors = sorted(((n, "x".join(map(str, size)), dtype) for _, n, size, dtype in block.saved.values()), reverse=True)
    rng = sum(n for n, _, dtype in tensors if dtype == "uint8")
    return {"mode": mode, "backend": backend or "eager", "saved_bytes": sum(n for n, _, _ in tensors) - rng,
            "rng_bytes": rng, "bwd_peak_bytes": block.peak,
            "saved": [f"{size} {dtype} {n}" for n, size, dtype in tensors]}  # fmt: skip


def configure() -> None:
    """Once per process, before measure(): count inductor's buffers, and dynamo set as torchtitan sets it."""
    _tracking_empty_strided()
    torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True  # as torchtitan's apply_compile
    torch._C._dynamo.eval_frame._set_lru_cache(False)  # as torchtitan's ActivationCheckpointing.apply


def main() -> None:
    import transformers

    configure()
    rows = []
    for shape in SHAPES + EXTRA_SHAPES:
        family, hidden, heads, kv, inter, seq, batch = shape
        row = {"family": family, "hidden": hidden, "heads": heads, "kv_heads": kv, "intermediate": inter, "seq": seq,
               "batch": batch, "runs": []}  # fmt: skip
        for backend, modes in (("inductor", MODES), (None, ("none", "full"))):
            for mode in modes:
                row["runs"].append(measure(shape, mode, backend))
                print(family, hidden, seq, batch, {k: v for k, v in row["runs"][-1].items() if k != "saved"}, flush=True)
        rows.append(row)
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "cpu", "dtype": "bfloat16",
           "rows": rows}  # fmt: skip
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")




def table(data: dict) -> str:
    """The docs/activations.md table (python validation/measure_compile_ac.py --table), zeroplan's side added."""
    from zeroplan.memory.activations.compiled import compiled_layer
    from zeroplan.memory.setup import Checkpointing
    from zeroplan.models.families import parse_family_config

    modes = {"none": Checkpointing.none, "full": Checkpointing.full, "selective-op": Checkpointing.selective_op}
    lines = ["| family | h | a | g | f | s | b | checkpointing | saved (measured) | zeroplan + rotary | backward above none "
             "(measured) | zeroplan | eager full's backward above none (measured) |", "|---" * 13 + "|"]
    for row in data["rows"]:
        config = {"model_type": row["family"], "hidden_size": row["hidden"], "num_attention_heads": row["heads"],
                  "num_key_value_heads": row["kv_heads"], "intermediate_size": row["intermediate"],
                  "num_hidden_layers": 1, "vocab_size": 256, "head_dim": row["hidden"] // row["heads"]}
        arch = parse_family_config(config, strict=False).architecture()
        runs = {(r["backend"], r["mode"]): r for r in row["runs"]}
        rotary = 2 * 2 * row["seq"] * (row["hidden"] // row["heads"])  # cos and sin, 1 x s x d in bf16
        none = compiled_layer(arch, row["batch"], row["seq"], 2, Checkpointing.none)
        eager_gap = runs["eager", "full"]["bwd_peak_bytes"] - runs["eager", "none"]["bwd_peak_bytes"]
        for mode, ckpt in modes.items():
            run, one = runs["inductor", mode], compiled_layer(arch, row["batch"], row["seq"], 2, ckpt)
            above = run["bwd_peak_bytes"] - runs["inductor", "none"]["bwd_peak_bytes"]
            modelled = one.kept_bytes + one.recompute - none.kept_bytes
            cells = [row["family"], row["hidden"], row["heads"], row["kv_heads"], row["intermediate"], row["seq"],
                     row["batch"], mode, f"{run['saved_bytes']:,}", f"{one.kept_bytes + rotary:,}",
                     "" if mode == "none" else f"{above:,}", "" if mode == "none" else f"{modelled:,}",
                     f"{eager_gap:,}" if mode == "full" else ""]  # fmt: skip
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        print(table(json.loads(OUT.read_text(encoding="utf-8"))))
    else:
        main()
