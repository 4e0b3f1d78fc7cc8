"""Replay one rank's allocations through the CUDA caching allocator's documented rules: reserved against allocated.

    python validation/replay_allocator.py --json validation/replay_allocator.json

CPU has no caching allocator, so the trace is recorded on CPU (validation/measure_fsdp2_streams.py's torchtitan-shaped
Llama under FSDP2, larger, one gloo rank: every new storage's bytes, the stream current when it was made, and when it
is freed) and replayed through the rules pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp states in its header
comment and applies in `malloc` / `free`:

- a block belongs to the stream it was allocated on; once freed it is reused only by that stream;
- sizes round up to 512 B; requests up to 1 MiB come from the small pool in 2 MiB segments, larger ones from the
  large pool: 20 MiB segments below 10 MiB, else the request rounded up to 2 MiB (`get_allocation_size`);
- the smallest free block that fits is taken (best fit) and split when the rest exceeds 1 MiB (large pool) or is
  at least 512 B (small); no free block fits: a new segment (cudaMalloc);
- a freed block merges with free neighbours of its segment; segments go back only on empty_cache (never here).

Reserved = every segment's bytes; allocated = every live block's. Three steps are replayed (the first makes the
optimizer states); the third's peaks are reported, with what the default stream's pool reserves beyond its own
allocated peak, and where it grew (each new segment over 4 MiB: step, op, MiB). expandable_segments (torchtitan's
run script sets it) is not replayed: it maps a stream's blocks into one growing range, and the same best-fit rule
leaves the same holes. The order in which Python frees a few tensors varies, so the figures move by a few MiB.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MIB = 1 << 20
SMALL, LARGE_MIN_SEGMENT, ROUND_LARGE = MIB, 10 * MIB, 2 * MIB  # kSmallSize, kMinLargeAlloc, kRoundLarge


def rounded(n: int) -> int:
    return max(512, -(-n // 512) * 512)


def segment_size(n: int) -> int:
    if n <= SMALL:
        return 2 * MIB  # kSmallBuffer
    if n < LARGE_MIN_SEGMENT:
        return 20 * MIB  # kLargeBuffer
    return -(-n // ROUND_LARGE) * ROUND_LARGE


class Allocator:
    """Per (stream, pool) free lists of (size, segment, offset); segments as sorted block maps."""

    def __init__(self):
        self.free: dict[tuple[str, bool], list[tuple[int, int, int]]] = {}
        self.blocks: dict[int, dict[int, list]] = {}  # segment -> offset -> [size, live]
        self.live: dict[int, tuple[int, int, int, str, bool]] = {}  # id -> (segment, offset, size, stream, small)
        self.reserved = self.allocated = 0
        self.segments = 0
        self.seg_stream: dict[int, str] = {}

    def malloc(self, key: int, nbytes: int, stream: str) -> None:
        size = rounded(nbytes)
        small = size <= SMALL
        pool = self.free.setdefault((stream, small), [])
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            block, seg, off = pool.pop(i)
        else:
            block, seg, off = segment_size(size), self.segments, 0
            self.segments += 1
            self.blocks[seg] = {0: [block, False]}
            self.seg_stream[seg] = stream
            self.reserved += block
        rest = block - size
        if rest > (0 if small else SMALL) and rest >= 512:
            self.blocks[seg][off] = [size, True]
            self.blocks[seg][off + size] = [rest, False]
            bisect.insort(pool, (rest, seg, off + size))
        else:
            self.blocks[seg][off] = [block, True]
            size = block
        self.live[key] = (seg, off, size, stream, small)
        self.allocated += size

    def release(self, key: int) -> None:
        seg, off, size, stream, small = self.live.pop(key)
        self.allocated -= size
        pool, blocks = self.free[(stream, small)], self.blocks[seg]
        blocks[off][1] = False
        offsets = sorted(blocks)
        at = offsets.index(off)
        if at + 1 < len(offsets) and not blocks[offsets[at + 1]][1]:  # merge the next free block
            nxt = offsets[at + 1]
            pool.remove((blocks[nxt][0], seg, nxt))
            blocks[off][0] += blocks.pop(nxt)[0]
        if at > 0 and not blocks[offsets[at - 1]][1]:  # merge into the previous free block
            prev = offsets[at - 1]
            pool.remove((blocks[prev][0], seg, prev))
            blocks[prev][0] += blocks.pop(off)[0]
            off = prev
        bisect.insort(pool, (blocks[off][0], seg, off))

    def reserved_by_stream(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for seg, blocks in self.blocks.items():
            out[self.seg_stream[seg]] = out.get(self.seg_stream[seg], 0) + sum(b[0] for b in blocks.values())
        return out


class Recorder:
    """A TorchDispatchMode's view of a step as ('a', id, bytes, stream, op) and ('f', id) events, in order."""

    def __init__(self, streams):
        import weakref

        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        events, ids, recorder = [], {}, self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                inputs = {streams._ptr(t) for t in tree_flatten((args, kwargs))[0] if hasattr(t, "untyped_storage")}
                for t in tree_flatten(out)[0]:
                    if hasattr(t, "untyped_storage") and not hasattr(t, "_local_tensor"):
                        st = t.untyped_storage()
                        ptr = st.data_ptr()
                        if ptr and ptr not in ids and ptr not in inputs and st.nbytes():
                            ids[ptr] = len(events)
                            events.append(("a", ids[ptr], st.nbytes(), recorder.stream(), str(func)))
                            weakref.finalize(st, recorder.freed, ptr)
                return out

        self.events, self.ids, self.mode, self.streams = events, ids, Mode(), streams

    def stream(self) -> str:
        return self.streams.TRACKER[0].stream if self.streams.TRACKER else self.streams.DEFAULT

    def freed(self, ptr: int) -> None:
        key = self.ids.pop(ptr, None)
        if key is not None:
            self.events.append(("f", key))


def record(steps: int = 3) -> list:
    """The trace of `steps` torchtitan-shaped steps on one gloo rank (FSDP2 world 1: no all-gather, its own streams)."""
    import os

    import torch
    import torch.distributed as dist

    import measure_fsdp2_streams as streams

    streams.D, streams.HEADS, streams.KV_HEADS, streams.FFN = 256, 8, 2, 768
    streams.VOCAB, streams.LAYERS, streams.BATCH, streams.SEQ = 32000, 2, 2, 512
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("REPLAY_PORT", "29533"))
    torch.set_num_threads(1)
    torch.cpu.stream = streams._stream
    dist.init_process_group("gloo", rank=0, world_size=1)
    model, opt = streams.build(torch.float32)
    idx = torch.randint(0, streams.VOCAB, (streams.BATCH, streams.SEQ), generator=torch.Generator().manual_seed(0))
    rec = Recorder(streams)
    marks = []
    for step in range(steps):
        tracker = streams.StreamTracker()  # only for its `stream` attribute, read by _stream
        streams.TRACKER[:] = [tracker]
        with rec.mode:
            opt.zero_grad(set_to_none=True)
            marks.append(("step", len(rec.events)))
            pred = model(idx)
            loss = torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), idx.flatten(0, 1))
            del pred
            marks.append(("backward", len(rec.events)))
            loss.backward()
            opt.step()
        if step == 0:
            streams._name_streams(model)
    streams.TRACKER.clear()
    dist.destroy_process_group()
    return rec.events, marks, streams.BATCH * streams.SEQ * streams.VOCAB


def replay(events: list, marks: list) -> dict:
    """The last step's peaks: allocated, reserved (by stream), and the default stream's reserve beyond its peak."""
    alloc = Allocator()
    starts = [i for name, i in marks if name == "step"]
    last = starts[-1]
    peak_alloc = peak_reserved = peak_default_alloc = 0
    growth = []  # the default pool's new segments of more than 4 MiB: [step, op, MiB]
    for i, ev in enumerate(events):
        if ev[0] == "a":
            before = alloc.reserved
            alloc.malloc(ev[1], ev[2], ev[3])
            if alloc.reserved - before > 4 * MIB and ev[3] == "default":
                growth.append([sum(i >= s for s in starts), ev[4], round((alloc.reserved - before) / MIB, 1)])
        else:
            alloc.release(ev[1])
        if i >= last:
            default_alloc = sum(v[2] for v in alloc.live.values() if v[3] == "default")
            peak_alloc, peak_reserved = max(peak_alloc, alloc.allocated), max(peak_reserved, alloc.reserved)
            peak_default_alloc = max(peak_default_alloc, default_alloc)
    by_stream = alloc.reserved_by_stream()
    return {"peak_allocated": peak_alloc, "peak_reserved": peak_reserved, "reserved_by_stream": by_stream,
            "default_reserved_beyond_its_peak": by_stream.get("default", 0) - peak_default_alloc,
            "default_pool_growth": growth}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    events, marks, tokens_vocab = record()
    out = replay(events, marks)
    out["e_T_V"] = 2 * tokens_vocab  # the bf16 logits' bytes
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
