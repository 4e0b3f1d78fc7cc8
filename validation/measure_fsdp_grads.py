"""Measure the gradient bytes FSDP holds beyond each rank's shard, on CPU (gloo), against zeroplan's terms.

    python validation/measure_fsdp_grads.py --json validation/fsdp_grads_measured.json --markdown table.md

A LoRA-shaped model (a frozen embedding and head, blocks of a frozen linear with rank-4 adapters beside a frozen
MLP linear) in plain PyTorch 2.13 on N = 2 and 3 gloo processes, one micro-step under no_sync and one synced:

- FSDP1, FULL_SHARD, use_orig_params=True, bf16-true (module in bf16) and bf16-mixed (MixedPrecision bf16),
  adapters inside their block's unit (ModuleWrapPolicy({Block}): litgpt / Lightning Fabric) or in units of their
  own (a lambda policy wrapping each adapter linear first, as peft's fsdp_auto_wrap_policy does). Measured: every
  FlatParameter's .grad after the no_sync backward (the whole gradients no_sync keeps) and after the synced one
  (the shards).
- FSDP2, fully_shard per block then the root, everything trainable, MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=None | float32): the accumulated unsharded gradients after a backward under
  set_requires_gradient_sync(False), and the reduce-scatter input of each unit (dist.reduce_scatter_single's input,
  what foreach_reduce allocates) in the synced backward.

Predicted with zeroplan.memory.engines (grads.py: no_sync_term, reduce_element; fsdp.py: flat_shard, dim0_shard).
CPU cannot show the caching allocator; what is compared is the tensors FSDP holds, which are the same on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

D, VOCAB, LAYERS, RANK = 64, 250, 3, 4  # VOCAB 250: units whose size is not a multiple of N (padding shows)


class Adapted(nn.Module):
    """A frozen linear with lora_A (r x d) and lora_B (d x r) beside it."""

    def __init__(self):
        super().__init__()
        self.base = nn.Linear(D, D, bias=False).requires_grad_(False)
        self.lora_a = nn.Linear(D, RANK, bias=False)
        self.lora_b = nn.Linear(RANK, D, bias=False)

    def forward(self, x):
        return self.base(x) + self.lora_b(self.lora_a(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Adapted()
        self.mlp = nn.Linear(D, D, bias=False).requires_grad_(False)

    def forward(self, x):
        return x + self.mlp(torch.relu(self.attn(x)))


class Model(nn.Module):
    def __init__(self, lora: bool):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(D, VOCAB, bias=False)
        if lora:
            self.emb.requires_grad_(False)
            self.head.requires_grad_(False)
        else:
            self.requires_grad_(True)

    def forward(self, idx):
        x = self.emb(idx)
        for block in self.h:
            x = block(x)
        return self.head(x).float().logsumexp(-1).mean()


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def fsdp1(precision: str, wrap: str, idx) -> dict:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, _or_policy, lambda_auto_wrap_policy
    import functools

    torch.manual_seed(0)
    model = Model(lora=True)
    if precision == "bf16-true":
        model = model.to(torch.bfloat16)
    blocks = ModuleWrapPolicy({Block})
    policy = blocks if wrap == "block" else functools.partial(_or_policy, policies=[functools.partial(
        lambda_auto_wrap_policy, lambda_fn=lambda m: m.__class__ is nn.Linear and m.weight.requires_grad), blocks])
    mpol = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if precision == "bf16-mixed" else None
    wrapped = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, auto_wrap_policy=policy, use_orig_params=True,
                   mixed_precision=mpol, device_id=torch.device("cpu"))
    flats = [m._handle.flat_param for m in wrapped.modules() if isinstance(m, FSDP) and m._handle is not None]
    with wrapped.no_sync():
        wrapped(idx).backward()
    kept = _bytes(f.grad for f in flats)
    wrapped(idx).backward()
    return {"no_sync": kept, "sharded": _bytes(f.grad for f in flats)}


def fsdp2(reduce: str, idx) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = Model(lora=False)
    mpol = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32 if reduce == "fp32" else None)
    for block in model.h:
        fully_shard(block, mp_policy=mpol)
    fully_shard(model, mp_policy=mpol)
    inputs = []
    orig = dist.reduce_scatter_single

    def spy(output=None, input=None, **kw):
        inputs.append(input.numel() * input.element_size())
        return orig(output=output, input=input, **kw)

    dist.reduce_scatter_single = spy
    try:
        model.set_requires_gradient_sync(False)
        model(idx).backward()
        params = [p for st in [model._get_fsdp_state()] + [b._get_fsdp_state() for b in model.h]
                  for p in st._fsdp_param_group.fsdp_params]
        kept = _bytes(p.unsharded_accumulated_grad if p.unsharded_accumulated_grad is not None
                      else p._unsharded_param.grad for p in params)
        model.set_requires_gradient_sync(True)
        model(idx).backward()
    finally:
        dist.reduce_scatter_single = orig
    return {"no_sync": kept, "reduce_inputs": inputs,
            "root": [tuple(p.shape) for n, p in model.named_parameters() if not n.startswith("h.")],
            "block": [tuple(p.shape) for p in model.h[0].parameters()]}


def worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    idx = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(rank))
    rows = [{"engine": "fsdp", "precision": p, "wrap": w, **fsdp1(p, w, idx)}
            for p in ("bf16-true", "bf16-mixed") for w in ("block", "own")]
    rows += [{"engine": "fsdp2", "precision": "bf16-mixed", "reduce": r, **fsdp2(r, idx)} for r in ("param", "fp32")]
    Path(out, f"rank{rank}.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def measure(world: int) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(world, port, tmp), nprocs=world, join=True)
        return [dict(row, world=world, rank=r) for r in range(world)
                for row in json.loads(Path(tmp, f"rank{r}.json").read_text())]


def lora_units(wrap: str) -> list[int]:
    """Elements of the FSDP1 units that carry a gradient, from the model's own parameters (not FSDP's): with the
    adapters inside the blocks every block whole; in units of their own, each adapter linear."""
    model = Model(lora=True)
    if wrap == "block":
        return [sum(p.numel() for p in b.parameters()) for b in model.h]
    return [m.weight.numel() for b in model.h for m in (b.attn.lora_a, b.attn.lora_b)]


def predicted(row: dict) -> dict:
    """zeroplan's terms for the row's model: no_sync's whole gradients, FSDP1's shards, FSDP2's reduce input."""
    from zeroplan.memory.engines.fsdp import dim0_shard, flat_shard
    from zeroplan.memory.engines.grads import no_sync_element, no_sync_numel, no_sync_term, reduce_element
    from zeroplan.memory.engines.storage import Storage
    from zeroplan.memory.setup import Engine, EngineOptions, ReduceDtype

    world = row["world"]
    if row["engine"] == "fsdp":
        store = Storage(2, 2, 4, 2) if row["precision"] == "bf16-true" else Storage(4, 4, 8, 2)
        grads = lora_units(row["wrap"])  # a unit with any trainable parameter: all of it
        kept = no_sync_term(no_sync_numel(Engine.fsdp, grads, world), no_sync_element(Engine.fsdp, store, EngineOptions())).bytes
        return {"no_sync": kept, "sharded": sum(flat_shard(n, world) for n in grads) * store.grad}
    options = EngineOptions(reduce_dtype=ReduceDtype.fp32 if row["reduce"] == "fp32" else None)
    store = Storage(4, 4, 8, 2)
    numel = sum(torch.Size(s).numel() for s in row["root"] + row["block"] * LAYERS)
    unit = max(sum(dim0_shard(tuple(s), world) for s in shapes) * world for shapes in (row["root"], row["block"]))
    return {"no_sync": no_sync_term(no_sync_numel(Engine.fsdp2, [numel], world), no_sync_element(Engine.fsdp2, store, options)).bytes,
            "reduce_input": unit * reduce_element(store, options)}


def compare(rows: list[dict]) -> list[dict]:
    table = []
    for row in rows:
        if row["rank"]:
            continue
        pred = predicted(row)
        got = {"no_sync": row["no_sync"]}
        got.update({"sharded": row["sharded"]} if "sharded" in row else {"reduce_input": max(row["reduce_inputs"])})
        label = (f"fsdp {row['precision']} adapters {row['wrap']}" if row["engine"] == "fsdp"
                 else f"fsdp2 reduce_dtype={'float32' if row['reduce'] == 'fp32' else 'None'}")
        for term, value in got.items():
            inputs = {k: row[k] for k in ("engine", "world", "precision", "wrap", "reduce", "root", "block") if k in row}
            table.append({"config": label, "world": row["world"], "term": term, "measured": value,
                          "predicted": pred[term], "error": (pred[term] - value) / value, "inputs": inputs})
    return table


def markdown(table: list[dict]) -> str:
    lines = ["| config | N | term | measured (B) | predicted (B) | error |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['config']} | {r['world']} | {r['term']} | {r['measured']:,} | {r['predicted']:,} | {r['error']:.2%} |"
              for r in table]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    table = compare([row for world in (2, 3) for row in measure(world)])
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    text = markdown(table)
    if args.markdown:
        args.markdown.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
