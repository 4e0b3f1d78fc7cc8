"""Measure torchao's Float8Linear training on CPU against nn.Linear: what autograd saves, the casts' transients, and
what a compiled block's partitioner keeps (zeroplan.memory.float8).

torchao==0.18.0 (torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args) runs eagerly on CPU here, and
torch==2.13.0's inductor compiles it on CPU (torch._scaled_mm has a CPU kernel). Two measurements:
  linear  one Float8Linear (Float8LinearConfig.from_recipe_name: tensorwise, rowwise, rowwise_with_gw_hp) against
          the nn.Linear it replaces, bf16, eager: the bytes autograd saves (pack hook, the weight excluded) and the
          largest live bytes in the forward and in the backward (validation/measure_reference.LiveBytes, every storage
          an op made, with a Float8TrainingTensor's inner tensors counted); `fwd`/`bwd` are the float8 peaks less
          nn.Linear's (the casts' transients), `model_*` zeroplan's.
  block   one transformers Llama decoder layer (validation/measure_compile.py's shapes and counting) with its linears
          converted as torchtitan converts them (torchao.float8.convert_to_float8_training), eager and compiled
          (torch.compile(block), inductor): the bytes the block saves for backward, against zeroplan's layer terms.
  gather  FSDP2 (fully_shard per block, MixedPrecisionPolicy bf16) on gloo with 2 and 3 processes, linears converted
          with Float8LinearConfig(enable_fsdp_float8_all_gather=True) or left bf16: in each block's forward, the
          bytes of its FSDPParams' all_gather_outputs and unsharded parameters (a Float8TrainingTensor's data and
          scale), against zeroplan.memory.engines.fsdp.unit_bytes.
  peak    the same compiled block (no checkpointing, tensorwise and bf16) through validation/measure_compile_ac.py's
          measure(prepare=...), whose backward high-water also counts inductor's own buffers: the block's backward
          peak, against zeroplan's saved set plus its float8 backward transient.
Writes validation/float8_measured.json (the parts named, the others kept). Needs torch, torchao, transformers:
    python validation/measure_float8.py [linear] [block] [gather] [peak]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils._pytree import tree_leaves

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validation import measure_compile  # noqa: E402
from validation.measure_reference import LiveBytes  # noqa: E402

RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
LINEARS = [(256, 128, 384), (512, 384, 128), (128, 256, 256), (1024, 256, 688)]  # (tokens, in, out)
BLOCKS = [("llama", 256, 4, 4, 688, 128, 2), ("llama", 256, 4, 2, 768, 64, 2)]
GATHERS = [(2, 64, 160), (3, 48, 96), (4, 64, 128)]  # (processes, width, inner width); rows divide evenly: a padded
# float8 shard (64 rows over 3) stops gloo with a collective size mismatch here, so padding is not measured
OUT = ROOT / "validation" / "float8_measured.json"


def _inner(t: torch.Tensor) -> list[torch.Tensor]:
    """A wrapper tensor's (Float8TrainingTensor's) inner tensors, recursively; a plain tensor itself."""
    if isinstance(t, torch.nn.Parameter):
        t = t.data  # a parameter wrapping a float8 tensor (FSDP2's unsharded parameter under float8 all-gather)
    if type(t) is not torch.Tensor and hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return [x for name in names for x in _inner(getattr(t, name))]
    return [t]


class Float8LiveBytes(LiveBytes):
    """LiveBytes that counts the float8 data and scales inside torchao's wrapper tensors."""

    def plain(self, out) -> list:
        return [x for t in tree_leaves(out) if isinstance(t, torch.Tensor) for x in _inner(t)]


def _linear_peaks(recipe: str | None, tokens: int, k: int, n: int) -> tuple[int, int, int]:
    """(forward peak, backward peak, saved bytes) of one linear, nn.Linear when recipe is None."""
    from torchao.float8 import Float8LinearConfig
    from torchao.float8.float8_linear import Float8Linear

    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n, bias=False).to(torch.bfloat16)
    mod = lin if recipe is None else Float8Linear.from_float(lin, config=Float8LinearConfig.from_recipe_name(recipe))
    x = torch.randn(tokens, k, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(tokens, n, dtype=torch.bfloat16)
    weight = lin.weight.untyped_storage().data_ptr()
    saved: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() != weight:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    rec = Float8LiveBytes(x, grad, lin.weight)
    with rec, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        start = rec.restart()
        out = mod(x)
        forward = rec.peak - start
        start = rec.restart()
        out.backward(grad)
        backward = rec.peak - start
    return forward, backward, sum(saved.values())


def measure_linear(recipe: str, tokens: int, k: int, n: int) -> dict:
    from zeroplan.memory.float8 import Float8Recipe, cast_transients

    base, f8 = _linear_peaks(None, tokens, k, n), _linear_peaks(recipe, tokens, k, n)
    model = cast_transients(Float8Recipe(recipe.replace("_", "-")), tokens, k, n, 2)
    return {"recipe": recipe, "tokens": tokens, "in": k, "out": n, "saved_linear": base[2], "saved_float8": f8[2],
            "fwd": f8[0] - base[0], "bwd": f8[1] - base[1], "model_fwd": model.forward, "model_bwd": model.backward}


def measure_block(shape: tuple, recipe: str) -> dict:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(recipe)
    row = measure_compile.measure(shape, prepare=lambda layer: convert_to_float8_training(layer, config=config))
    row.pop("compiled_over_eager")
    return {"recipe": recipe, **row}


def _gather_model(d: int, f: int):
    class Block(torch.nn.Module):  # a pre-norm MLP block: a 1-D norm weight beside two linears
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d, bias=False)
            self.up, self.down = torch.nn.Linear(d, f, bias=False), torch.nn.Linear(f, d, bias=False)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(self.norm(x))))

    return torch.nn.Sequential(Block(), Block())


def _gather_worker(rank: int, world: int, port: int, d: int, f: int, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    row = {}
    for name in ("bf16", "float8"):
        torch.manual_seed(0)
        model = _gather_model(d, f)
        if name == "float8":
            convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        seen: list[tuple[int, int]] = []

        def pre(module, args):  # after FSDP's own pre-forward hook (prepended): the block is unsharded
            group = module._get_fsdp_state()._fsdp_param_group
            outputs = sum(t.untyped_storage().nbytes() for p in group.fsdp_params for t in p.all_gather_outputs)
            unsharded = sum(t.untyped_storage().nbytes() for p in group.fsdp_params for t in _inner(p._unsharded_param))
            seen.append((outputs, unsharded))

        for block in model:
            block.register_forward_pre_hook(pre)
        model(torch.randn(2, 8, d)).float().sum().backward()
        row[f"{name}_all_gather_outputs"], row[f"{name}_unsharded"] = max(seen)
    if rank == 0:
        Path(out_dir, "row.json").write_text(json.dumps(row))
    dist.destroy_process_group()


def measure_gather(world: int, d: int, f: int, port: int) -> dict:
    import torch.multiprocessing as mp

    from zeroplan.memory.engines.fsdp import unit_bytes

    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_gather_worker, args=(world, port, d, f, out_dir), nprocs=world)
        row = json.loads(Path(out_dir, "row.json").read_text())
    block = ((d,), (f, d), (d, f))
    return {"world": world, "width": d, "inner": f, **row, "model_bf16": unit_bytes(block, world, 2),
            "model_float8": unit_bytes(block, world, 2, float8=True)}


def measure_peak(shape: tuple) -> dict:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from validation.measure_compile_ac import configure, measure

    configure()
    convert = lambda layer: convert_to_float8_training(layer, config=Float8LinearConfig.from_recipe_name("tensorwise"))  # noqa: E731
    bf16, f8 = measure(shape, "none", "inductor"), measure(shape, "none", "inductor", prepare=convert)
    family, hidden, heads, kv, inter, seq, batch = shape
    return {"family": family, "hidden": hidden, "heads": heads, "kv_heads": kv, "intermediate": inter, "seq": seq,
            "batch": batch, "bf16_saved": bf16["saved_bytes"], "bf16_bwd_peak": bf16["bwd_peak_bytes"],
            "float8_saved": f8["saved_bytes"], "float8_bwd_peak": f8["bwd_peak_bytes"]}  # fmt: skip


def main() -> None:
    import torchao
    import transformers

    parts = set(sys.argv[1:]) or {"linear", "block", "gather", "peak"}
    out = json.loads(OUT.read_text()) if OUT.exists() else {}
    out.update({"torch": torch.__version__, "torchao": torchao.__version__, "transformers": transformers.__version__,
                "device": "cpu", "dtype": "bfloat16"})  # fmt: skip
    if "linear" in parts:
        out["linears"] = [measure_linear(r, *shape) for shape in LINEARS for r in RECIPES]
    if "block" in parts:
        out["blocks"] = [measure_block(shape, recipe) for shape in BLOCKS for recipe in RECIPES]
    if "gather" in parts:
        out["gathers"] = [measure_gather(*shape, port=29540 + i) for i, shape in enumerate(GATHERS)]
    if "peak" in parts:
        out["peaks"] = [measure_peak(BLOCKS[0])]
    for part in ("linears", "blocks", "gathers", "peaks"):
        for row in out.get(part, []):
            print(part, row, flush=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
