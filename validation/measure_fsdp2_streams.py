"""Measure, on CPU (gloo), which CUDA stream FSDP2 allocates each tensor on, and what the loss's backward holds.

    python validation/measure_fsdp2_streams.py --json validation/fsdp2_streams_measured.json --markdown table.md

The CUDA caching allocator caches a freed block for the stream that allocated it: only an allocation on that
same stream can reuse it (PyTorch docs, "CUDA semantics: memory management" and `Tensor.record_stream`; the
blocks return to the device only on `empty_cache()` or when an allocation would otherwise fail). So what FSDP2
allocates on its own streams is reserved memory that the default stream's activations cannot use. CPU has no
streams, but FSDP2 runs the same code on CPU: `torch.cpu.stream(s)` is patched here to record which of FSDP2's
streams (`FSDPCommContext`: all_gather_copy_in_stream, all_gather_stream, reduce_scatter_stream) is current, and
a TorchDispatchMode tags every new storage with it. Measured per stream: the most bytes alive at once (the pool
that stream keeps reserved from the second step on) and what is alive after the backward.

The model is torchtitan's Llama shape (pytorch/torchtitan@9dec370:torchtitan/models/llama/model.py: RMSNorm,
wq/wk/wv/wo with repeat_kv, SwiGLU w1/w2/w3, final norm, untied output), wrapped as its parallelize_llama.py
apply_fsdp does (fully_shard per block, reshard_after_forward=False for the last, then the root),
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32 | bf16), AdamW(foreach), torchtitan's loop
(train.py: zero_grad, pred = model(x), loss = cross_entropy(pred.flatten(0, 1).float(), labels), del pred,
backward, step). The second of three steps is measured.

Predicted: the reduce-scatter stream keeps every sharded gradient (zeroplan.memory.engines: fsdp2_shard x 4 B
fp32) plus, with a bf16 reduce, one unit's bf16 reduce-scatter output before its cast; the loss's backward holds
three T x V fp32 tensors (zeroplan.memory.activations.loss: LossBytes.backward).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import weakref
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

D, HEADS, KV_HEADS, FFN, VOCAB, LAYERS, BATCH, SEQ, STEPS = 64, 4, 2, 160, 1003, 3, 2, 32, 3
DEFAULT = "default"


class RMSNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        hd = D // HEADS
        self.wq, self.wk = nn.Linear(D, D, bias=False), nn.Linear(D, KV_HEADS * hd, bias=False)
        self.wv, self.wo = nn.Linear(D, KV_HEADS * hd, bias=False), nn.Linear(D, D, bias=False)
        self.w1, self.w3, self.w2 = nn.Linear(D, FFN, bias=False), nn.Linear(D, FFN, bias=False), nn.Linear(FFN, D, bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(D), RMSNorm(D)

    def attention(self, x):
        b, s, _ = x.shape
        hd, rep = D // HEADS, HEADS // KV_HEADS
        q = self.wq(x).view(b, s, HEADS, hd).transpose(1, 2)
        k = self.wk(x).view(b, s, KV_HEADS, hd).repeat_interleave(rep, dim=2).transpose(1, 2)
        v = self.wv(x).view(b, s, KV_HEADS, hd).repeat_interleave(rep, dim=2).transpose(1, 2)
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, D))

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.w2(nn.functional.silu(self.w1(self.ffn_norm(h))) * self.w3(self.ffn_norm(h)))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.output = RMSNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        h = self.tok_embeddings(idx)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def _ptr(t: torch.Tensor) -> int:
    """The data pointer of a tensor's storage (a DTensor's local shard's); 0 where it has none."""
    t = getattr(t, "_local_tensor", t)
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:
        return 0


class StreamTracker(TorchDispatchMode):
    """Live storages by the stream current when each was made; per stream, the most bytes alive at once."""

    def __init__(self):
        super().__init__()
        self.stream, self.live, self.peak, self.moment = DEFAULT, {}, {}, ""
        self.default_at: dict[str, int] = {}  # the default stream's most bytes alive per moment

    def alive(self, stream: str) -> int:
        return sum(n for n, s in self.live.values() if s == stream)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {_ptr(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and not hasattr(t, "_local_tensor"):
                st = t.untyped_storage()
                key = st.data_ptr()  # a view of an input (split, as_strided) allocates nothing
                if key and key not in self.live and key not in inputs and st.nbytes():
                    self.live[key] = (st.nbytes(), self.stream)
                    weakref.finalize(st, self.live.pop, key, None)
        for stream in {s for _, s in self.live.values()} | {self.stream}:
            self.peak[stream] = max(self.peak.get(stream, 0), self.alive(stream))
        if self.moment:
            self.default_at[self.moment] = max(self.default_at.get(self.moment, 0), self.alive(DEFAULT))
        return out


TRACKER: list[StreamTracker] = []
NAMES: dict[int, str] = {}
MODEL: list = []  # the model being run: its FSDP2 state names the streams once its lazy init made them


@contextlib.contextmanager
def _stream(s):
    """torch.cpu.stream(s) as FSDP2 enters it, recording the stream for the tracker."""
    tracker = TRACKER[0] if TRACKER else None
    before = tracker.stream if tracker else None
    if tracker and id(s) not in NAMES and MODEL:
        _name_streams(MODEL[0])
    if tracker:
        tracker.stream = NAMES.get(id(s), DEFAULT)
    try:
        yield
    finally:
        if tracker:
            tracker.stream = before


def build(reduce_dtype: torch.dtype):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = Llama()
    MODEL[:] = [model]
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
    for i, block in enumerate(model.layers):
        fully_shard(block, mp_policy=mp_policy, reshard_after_forward=i < LAYERS - 1)
    fully_shard(model, mp_policy=mp_policy)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)


def _name_streams(model) -> None:
    ctx = model._get_fsdp_state()._comm_ctx
    for name in ("all_gather_copy_in_stream", "all_gather_stream", "reduce_scatter_stream", "all_reduce_stream"):
        if hasattr(ctx, name):
            NAMES[id(getattr(ctx, name))] = name


def worker(rank: int, world: int, port: int, jobs: list, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.cpu.stream = _stream
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    for reduce_name in jobs:
        model, opt = build({"fp32": torch.float32, "bf16": torch.bfloat16}[reduce_name])
        idx = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(rank))
        for step in range(STEPS):
            tracker = StreamTracker()
            measured = step == 1
            TRACKER[:] = [tracker] if measured else []
            with tracker if measured else contextlib.nullcontext():
                opt.zero_grad(set_to_none=True)
                tracker.moment = "forward"
                pred = model(idx)
                tracker.moment = "end of forward"
                loss = nn.functional.cross_entropy(pred.flatten(0, 1).float(), idx.flatten(0, 1))
                del pred
                before_backward = tracker.alive(DEFAULT)
                tracker.moment = "backward of the loss"
                loss.backward()
                tracker.moment = "after backward"
                rs_after_backward = tracker.alive("reduce_scatter_stream")
                opt.step()
                tracker.moment = ""
            if step == 0:
                _name_streams(model)
            if measured:
                row = {"reduce_dtype": reduce_name, "rank": rank, "peak_by_stream": dict(tracker.peak),
                       "reduce_scatter_alive_after_backward": rs_after_backward,
                       "default_before_loss_backward": before_backward, "default_by_moment": tracker.default_at}
        rows.append(row)
        TRACKER.clear()
        del model, opt
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def measure(world: int, jobs: list) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(world, port, jobs, tmp), nprocs=world, join=True)
        return [row for r in range(world) for row in json.loads(Path(tmp, f"rank{r}.json").read_text())]


def layout():
    """The model's tensors as zeroplan wraps them: the root (embedding, final norm, output) and one block."""
    from zeroplan.memory.engines.layout import ModelLayout

    hd = D // HEADS
    block = ((D, D), (KV_HEADS * hd, D), (KV_HEADS * hd, D), (D, D), (FFN, D), (FFN, D), (D, FFN), (D,), (D,))
    return ModelLayout(root=((VOCAB, D), (D,), (VOCAB, D)), block=block, num_blocks=LAYERS)


def loss_over_forward() -> int:
    """zeroplan's loss's backward (logits freed) less the forward's end (logits, saved log-softmax, fp32 copy), for
    this model's vocabulary and hidden size on a Llama architecture (memory.activations.loss, Loss.hf)."""
    from dataclasses import replace

    from zeroplan.memory.activations.loss import loss_bytes
    from zeroplan.memory.activations.traits import traits_of
    from zeroplan.memory.setup import Loss
    from zeroplan.models.presets import load_model

    arch = replace(load_model("llama-3.1-8b").config.architecture(), vocab_size=VOCAB, hidden_size=D)
    head = loss_bytes(arch, traits_of(arch), BATCH, SEQ, 2, Loss.hf)
    return head.backward - (head.saved + head.transient + head.logits)


def predicted(world: int, reduce_name: str) -> dict:
    from zeroplan.memory.engines.storage import Storage
    from zeroplan.memory.engines.streams import all_gather_stream_bytes, reduce_stream_bytes

    store = Storage(param=4, grad=4, optimizer=8, compute=2)
    return {"reduce_scatter_stream": reduce_stream_bytes(layout(), world, store, {"fp32": 4, "bf16": 2}[reduce_name]),
            "all_gather_copy_in_stream": all_gather_stream_bytes(layout(), world, store, reshard=True),
            "loss_backward_over_forward": loss_over_forward()}


def compare(rows: list[dict], world: int) -> list[dict]:
    out = []
    for reduce_name in sorted({r["reduce_dtype"] for r in rows}):
        ranks = [r for r in rows if r["reduce_dtype"] == reduce_name]
        pred = predicted(world, reduce_name)
        rs = max(r["peak_by_stream"].get("reduce_scatter_stream", 0) for r in ranks)
        fwd = max(r["default_by_moment"]["end of forward"] for r in ranks)
        bwd = max(r["default_by_moment"]["backward of the loss"] for r in ranks)
        out.append({"N": world, "reduce_dtype": reduce_name,
                    "reduce_scatter_stream_measured": rs, "reduce_scatter_stream_predicted": pred["reduce_scatter_stream"],
                    "reduce_scatter_alive_after_backward": max(r["reduce_scatter_alive_after_backward"] for r in ranks),
                    "copy_in_stream_measured": max(r["peak_by_stream"].get("all_gather_copy_in_stream", 0) for r in ranks),
                    "copy_in_stream_predicted": pred["all_gather_copy_in_stream"],
                    "loss_backward_over_forward_measured": bwd - fwd,
                    "loss_backward_over_forward_predicted": pred["loss_backward_over_forward"]})
    return out


def markdown(table: list[dict]) -> str:
    head = ("| N | reduce_dtype | reduce-scatter stream, most alive: measured | predicted | after backward | "
            "all-gather copy-in stream, most alive: measured | predicted | "
            "loss's backward over the forward's end: measured | predicted |\n"
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
    return head + "".join(
        f"| {t['N']} | {t['reduce_dtype']} | {t['reduce_scatter_stream_measured']:,} | {t['reduce_scatter_stream_predicted']:,} "
        f"| {t['reduce_scatter_alive_after_backward']:,} | {t['copy_in_stream_measured']:,} | {t['copy_in_stream_predicted']:,} "
        f"| {t['loss_backward_over_forward_measured']:,} | {t['loss_backward_over_forward_predicted']:,} |\n" for t in table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    table = []
    for world in (2, 3):
        table += compare(measure(world, ["fp32", "bf16"]), world)
    text = markdown(table)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
