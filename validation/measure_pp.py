"""Measure per-rank parameter, gradient, optimizer-state and peak saved-activation bytes under PyTorch's pipeline
schedules (torch.distributed.pipelining) on CPU with gloo, and compare with zeroplan's pipeline model.

Needs a CPU build of PyTorch and transformers; zeroplan itself never imports either.

    /work/venv-hf/bin/python validation/measure_pp.py            # every case; writes validation/pp_measured.json
    /work/venv-hf/bin/python validation/measure_pp.py --table    # the docs/parallelism.md table from the JSON

The model is transformers' LlamaForCausalLM (tiny: validation/pp_predicted.py's CONFIG; fp32, SDPA, no dropout),
its layers split into contiguous equal stages as zeroplan splits them: the embedding on the first stage, the final
norm and the head on the last (torchtitan splits Llama the same way: torchtitan/distributed/pipeline_parallel.py,
pipeline_module_split). Each stage is a PipelineStage; one process per pipeline rank, gloo. Schedules: GPipe and
1F1B (one stage per rank), Interleaved1F1B and InterleavedZeroBubble (two stages per rank, rank r holding stages r
and r + pp, the "loop" placement), ZBVZeroBubble (two stages per rank, r and 2 pp - 1 - r, the "v" placement).
step() is called as torchtitan calls it (torchtitan/train.py, Trainer.forward_backward_step): the inputs on the rank of the
first stage, the labels on the rank of the last, return_outputs=False. The loss is transformers' shifted
cross-entropy (logits[:, :-1] against ids[:, 1:]), computed per micro-batch by the schedule.

Each case runs three steps with the hooks on (step 0 settles the schedule: shape inference, receive buffers; steps
1 and 2 are measured, each beside whatever the steps before left referenced), then AdamW's step. Per rank:
  parameters, gradients, optimizer   local bytes of the rank's stage modules' parameters, .grad, exp_avg + exp_avg_sq
  activations   the PEAK over step 2 of its own live saved-activation bytes: every tensor autograd saves is seen by
                a saved_tensors_hooks pack hook, which returns a small box holding it; a weakref finalizer on the
                box fires when autograd lets the saved tensor go. Live bytes are the unique storages
                (untyped_storage data pointers) with at least one live box, parameters excluded, plus the logits the
                last stage returns (held by the stage for its backward; validation/measure_tp.py adds them too),
                released with the tensor. activations_by_step: steps 1 and 2.
  in_flight     at that peak, the (stage, micro-batch) pairs of the step with live saved tensors (at_peak: each with
                the share of that pair's most bytes it still held); forwards on a stage run in micro-batch order,
                so a forward pre-hook numbers them. other_bytes: this step's bytes of pairs with no saved tensor
                left (the last stage's previous logits); earlier_steps_bytes: tensors of steps before, still live
  order_in_flight   the most pairs the schedule's own action list (pipeline_order) has opened (F) and not closed
                (B, or W after I); the single-stage schedules run their own loop, not the list
  one_micro_batch_by_stage   the most bytes one (stage, micro-batch) pair held
  live_after_step   saved bytes still referenced after the last step returned and gc.collect()
  with_earlier_steps_by_step   the peak of everything live, earlier steps' tensors included
  outputs_held  at the peak, the bytes of the non-last stages' outputs the stage keeps for its backward
                (PipelineStage.fwd_cache), not saved by autograd, so not in `activations`
  recv_buffers  the receive buffers PipelineStage allocates once per micro-batch (activations from the previous
                stage, gradients from the next) and keeps across steps
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import weakref
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from validation.pp_predicted import CONFIG, MICRO_BATCH, SEQ, predicted  # noqa: E402

SCHEDULES = ("1f1b", "gpipe", "interleaved-1f1b", "interleaved-zb", "zbv")  # zeroplan's Schedule values
PPS, MICRO_BATCHES = (2, 4), (4, 8)
if os.environ.get("ZP_CASES"):  # e.g. ZP_CASES=2x4x1f1b,4x8xzbv
    CASES = [(int(p), int(m), s) for p, m, s in (c.split("x", 2) for c in os.environ["ZP_CASES"].split(","))]
else:
    CASES = [(pp, m, s) for pp in PPS for m in MICRO_BATCHES for s in SCHEDULES]
OUT = Path(os.environ.get("ZP_OUT") or Path(__file__).with_name("pp_measured.json"))  # ZP_OUT: a trial run elsewhere
STEPS = 3  # step 0 settles the schedule; 1 and 2 measured (the JSON keeps step 2, the per-step peaks both)


class Tracker:
    """Live saved storages, each with its bytes, live references and (stage, micro-batch, step) tag; the peak."""

    def __init__(self, params: set[int]):
        self.params, self.live, self.tag, self.step = params, {}, None, 0
        self.recv = dict  # () -> {storage pointer: bytes} of the stages' receive buffers (set by the case)
        self.tag_bytes: dict[tuple, int] = {}
        self.tag_max: dict[tuple, int] = {}
        self.start(0)

    def start(self, step: int) -> None:
        self.step, self.peak, self.peak_entries, self.peak_outputs, self.peak_all = step, 0, [], 0, 0
        self.peak_total, self.total_parts = 0, {}

    def add(self, t: torch.Tensor, kind: str):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in self.params or storage.nbytes() == 0:
            return None
        entry = self.live.get(ptr)
        if entry is None:
            entry = self.live[ptr] = {"bytes": storage.nbytes(), "refs": 0, "tag": self.tag, "kind": kind}
            if kind != "output":
                self.tag_bytes[self.tag] = self.tag_bytes.get(self.tag, 0) + entry["bytes"]
                self.tag_max[self.tag] = max(self.tag_max.get(self.tag, 0), self.tag_bytes[self.tag])
        entry["refs"] += 1
        self._update()
        return ptr

    def release(self, ptr: int) -> None:
        entry = self.live[ptr]
        entry["refs"] -= 1
        if not entry["refs"]:
            del self.live[ptr]
            if entry["kind"] != "output":
                self.tag_bytes[entry["tag"]] -= entry["bytes"]

    def _update(self) -> None:
        # the peak of this step's own tensors; what earlier steps left referenced is reported beside it
        counted = [e for e in self.live.values() if e["kind"] != "output"]
        own = sum(e["bytes"] for e in counted if e["tag"] is not None and e["tag"][2] == self.step)
        self.peak_all = max(self.peak_all, sum(e["bytes"] for e in counted))
        if own > self.peak:
            self.peak, self.peak_entries = own, [dict(e) for e in counted]
            self.peak_outputs = sum(e["bytes"] for e in self.live.values() if e["kind"] == "output")
        # everything the rank holds for its activations: saved tensors (any step), the stage outputs held and the
        # receive buffers, each storage once (an in-flight receive buffer is also what the first layer saves)
        recv = self.recv()
        union = {ptr: e["bytes"] for ptr, e in self.live.items()} | recv
        total = sum(union.values())
        if total > self.peak_total:
            held = sum(e["bytes"] for p, e in self.live.items() if e["kind"] == "output" and p not in recv)
            self.peak_total = total
            self.total_parts = {"saved": total - held - sum(recv.values()), "outputs_held": held,
                                "recv_buffers": sum(recv.values())}

    def snapshot(self) -> dict:
        """This step's peak: its bytes, the (stage, micro-batch) pairs of this step with live saved tensors then
        (with the share of that pair's most bytes they held), what else was live (this step's logits of a
        micro-batch with no saved tensor left; tensors of earlier steps) and the stage outputs held."""
        one: dict[int, int] = {}
        for (i, _, n), b in self.tag_max.items():
            if n == self.step:
                one[i] = max(one.get(i, 0), b)
        at: dict[tuple, int] = {}
        for e in self.peak_entries:
            at[e["tag"]] = at.get(e["tag"], 0) + e["bytes"]
        saved = {e["tag"] for e in self.peak_entries if e["kind"] == "saved" and e["tag"][2] == self.step}
        return {"activations": self.peak, "with_earlier_steps": self.peak_all,
                "at_peak": sorted([t[0], t[1], round(b / one[t[0]], 3)] for t, b in at.items() if t in saved),
                "other_bytes": sum(b for t, b in at.items() if t not in saved and t[2] == self.step),
                "earlier_steps_bytes": sum(b for t, b in at.items() if t[2] < self.step),
                "one_micro_batch": one, "outputs_held": self.peak_outputs, "total": self.peak_total,
                "total_parts": self.total_parts}


class _Box:
    __slots__ = ("t", "__weakref__")

    def __init__(self, t):
        self.t = t


class Stage(torch.nn.Module):
    """Layers [first, last) of the model; the embedding if it starts at 0, the final norm and head if it ends at L."""

    def __init__(self, model, first: int, last: int):
        super().__init__()
        n = model.config.num_hidden_layers
        self.embed = model.model.embed_tokens if first == 0 else None
        self.layers = torch.nn.ModuleList(model.model.layers[first:last])
        self.rotary = model.model.rotary_emb  # buffers only: each stage computes cos/sin for its micro-batch
        self.norm, self.head = (model.model.norm, model.lm_head) if last == n else (None, None)

    def forward(self, x):
        h = self.embed(x) if self.embed is not None else x
        positions = torch.arange(h.shape[1]).unsqueeze(0)
        cos_sin = self.rotary(h, position_ids=positions)
        for layer in self.layers:  # no mask: SDPA runs causal (transformers' sdpa_attention_forward)
            h = layer(h, attention_mask=None, position_embeddings=cos_sin, position_ids=positions)
        return self.head(self.norm(h)) if self.head is not None else h


def loss_fn(logits, ids):
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].reshape(-1))


def _stage_ids(schedule: str, pp: int, rank: int) -> list[int]:
    if schedule in ("1f1b", "gpipe"):
        return [rank]
    return [rank, rank + pp] if schedule != "zbv" else [rank, 2 * pp - 1 - rank]


def _schedule(name: str, stages, m: int):
    from torch.distributed import pipelining as pl

    cls = {"1f1b": pl.Schedule1F1B, "gpipe": pl.ScheduleGPipe, "interleaved-1f1b": pl.ScheduleInterleaved1F1B,
           "interleaved-zb": pl.ScheduleInterleavedZeroBubble, "zbv": pl.ScheduleZBVZeroBubble}[name]
    return cls(stages[0] if name in ("1f1b", "gpipe") else stages, n_microbatches=m, loss_fn=loss_fn)


def order_in_flight(actions) -> int:
    """The most (stage, micro-batch) pairs a rank's action list holds at once: a forward (F) opens one, a full
    backward (B) or a weight backward (W) closes it (an input backward I keeps what W needs). Actions print as
    torch.distributed.pipelining's _Action does ("3F0", "3I0", "3W0", "3B0")."""
    import re

    live, most = set(), 0
    for action in actions:
        found = re.fullmatch(r"(\d+)(F|I|B|W)(\d+)", str(action)) if action is not None else None
        if found:
            key = (int(found[1]), int(found[3]))
            if found[2] == "F":
                live.add(key)
            elif found[2] in "BW":
                live.discard(key)
            most = max(most, len(live))
    return most


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _run_case(rank: int, pp: int, m: int, name: str) -> dict:
    import transformers
    from torch.distributed.pipelining import PipelineStage

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).to(torch.float32)
    model.config._attn_implementation = "sdpa"
    model.train()
    ids_here = _stage_ids(name, pp, rank)
    num_stages = pp * (1 if len(ids_here) == 1 else 2)
    per = CONFIG["num_hidden_layers"] // num_stages
    modules = {i: Stage(model, i * per, (i + 1) * per) for i in ids_here}
    stages = [PipelineStage(modules[i], i, num_stages, torch.device("cpu")) for i in ids_here]
    schedule = _schedule(name, stages, m)
    order = getattr(schedule, "pipeline_order", None)  # the multi-stage schedules' action lists, per rank
    params = [p for mod in modules.values() for p in mod.parameters()]
    torch.manual_seed(1)
    ids = torch.randint(1, CONFIG["vocab_size"], (MICRO_BATCH * m, SEQ))

    def step():
        kwargs = {"return_outputs": False}
        if num_stages - 1 in ids_here:
            kwargs["target"] = ids
        schedule.step(*((ids,) if 0 in ids_here else ()), **kwargs)

    tracker = Tracker({p.untyped_storage().data_ptr() for p in params})

    def recv_storages() -> dict[int, int]:
        found = {}
        for st in stages:
            for infos in (*st.args_recv_info.values(), *st.grad_recv_info.values()):
                for info in infos:
                    if getattr(info, "buffer", None) is not None:
                        found[info.buffer.untyped_storage().data_ptr()] = info.buffer.untyped_storage().nbytes()
        return found

    tracker.recv = recv_storages
    counters = dict.fromkeys(ids_here, 0)

    def pre_hook(i):
        def hook(module, args):
            if torch.is_grad_enabled():  # not shape inference
                tracker.tag = (i, counters[i], tracker.step)
                counters[i] += 1
        return hook

    def post_hook(i):
        def hook(module, args, out):
            if torch.is_grad_enabled():
                ptr = tracker.add(out, "logits" if i == num_stages - 1 else "output")
                if ptr is not None:
                    weakref.finalize(out, tracker.release, ptr)
        return hook

    handles = [h for i, mod in modules.items()
               for h in (mod.register_forward_pre_hook(pre_hook(i)), mod.register_forward_hook(post_hook(i)))]

    def pack(t):
        # the box holds a detached alias (same storage): a box holding `t` itself would make a reference cycle
        # through autograd's graph when `t` is its node's own output (torch.autograd.graph.saved_tensors_hooks'
        # warning), which keeps a graph that no backward frees (shape inference's) alive after the step
        box = _Box(t.detach())
        ptr = tracker.add(t, "saved")
        if ptr is not None:
            weakref.finalize(box, tracker.release, ptr)
        return box

    # Step 0 settles the schedule (shape inference, receive buffers); steps 1 and 2 are measured, each with what
    # the step before left referenced, so a steady state shows.
    peaks, after = [], []
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.t):
        for n in range(STEPS):
            tracker.start(n)
            counters = dict.fromkeys(ids_here, 0)
            step()
            for p in params:
                p.grad = None if n < STEPS - 1 else p.grad
            gc.collect()
            peaks.append(tracker.snapshot())
            after.append(sum(e["bytes"] for e in tracker.live.values() if e["kind"] != "output"))
    for h in handles:
        h.remove()
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    opt.step()
    state = [v for s in opt.state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]
    recv = recv_storages()  # unique receive buffers: activations in (args_recv_info), gradients in (grad_recv_info)
    last = peaks[-1]
    pairs = last["at_peak"]
    return {"pp": pp, "micro_batches": m, "schedule": name, "rank": rank, "stages": ids_here,
            "parameters": _nbytes(params), "gradients": _nbytes(p.grad for p in params if p.grad is not None),
            "optimizer": _nbytes(state), "activations": last["activations"],
            "activations_by_step": [p["activations"] for p in peaks[1:]],
            "with_earlier_steps_by_step": [p["with_earlier_steps"] for p in peaks[1:]],
            "in_flight": len(pairs), "in_flight_by_stage": {str(i): sum(p[0] == i for p in pairs) for i in ids_here},
            "at_peak": pairs, "other_bytes": last["other_bytes"], "earlier_steps_bytes": last["earlier_steps_bytes"],
            "one_micro_batch_by_stage": {str(i): last["one_micro_batch"].get(i, 0) for i in ids_here},
            "live_after_step": after[-1], "order_in_flight": order_in_flight(order[rank]) if order else None,
            "outputs_held": last["outputs_held"], "recv_buffers": sum(recv.values()),
            "total": last["total"], "total_by_step": [p["total"] for p in peaks[1:]], "total_parts": last["total_parts"]}


def _worker(rank: int, pp: int, cases: list, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=pp, timeout=timedelta(seconds=120))
    rows = []
    try:
        for _, m, name in cases:
            try:
                rows.append(_run_case(rank, pp, m, name))
            except Exception as e:  # noqa: BLE001 - recorded: which schedules run on CPU is part of the finding
                rows.append({"pp": pp, "micro_batches": m, "schedule": name, "rank": rank,
                             "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
            dist.barrier()
        Path(out, f"{rank}.json").write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(pp: int, cases: list) -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=(pp, cases, _free_port(), out), nprocs=pp, join=True)
        return [row for r in range(pp) for row in json.loads(Path(out, f"{r}.json").read_text())]


def main() -> None:
    rows = []
    for pp in sorted({c[0] for c in CASES}):
        for got in measure(pp, [c for c in CASES if c[0] == pp]):
            if "error" not in got and got["schedule"] == "1f1b":
                got["zeroplan"] = predicted(pp, got["micro_batches"], got["rank"])
            rows.append(got)
            print(json.dumps(got), flush=True)
    rows.sort(key=lambda r: (r["pp"], r["micro_batches"], SCHEDULES.index(r["schedule"]), r["rank"]))
    OUT.write_text(json.dumps({"config": CONFIG, "micro_batch": MICRO_BATCH, "seq_len": SEQ,
                               "torch": torch.__version__, "rows": rows}, indent=1) + "\n")


def table() -> str:
    """The docs/parallelism.md table from validation/pp_measured.json: one row per case, its ranks in order; zeroplan's
    side (validation/pp_predicted.predicted_rank, its total with PyTorch's pipelining term) against the measured
    total (saved + stage outputs held + receive buffers, each storage once)."""
    from validation.pp_predicted import predicted_rank

    data = json.loads(OUT.read_text())
    lines = ["| pp | m | schedule | in flight at the peak, ranks 0; 1; ... (chunk, micro-batch pairs) | the schedule's "
             "action list | peak saved bytes per rank | / one micro-batch of the rank | measured total per rank (saved "
             "+ outputs held + receive buffers) | zeroplan's total vs measured, per rank |",
             "|---|---|---|---|---|---|---|---|---|"]
    cases: dict[tuple, list[dict]] = {}
    for row in data["rows"]:
        cases.setdefault((row["pp"], row["micro_batches"], row["schedule"]), []).append(row)
    for (pp, m, name), rows in cases.items():
        ratio = [r["activations"] / sum(r["one_micro_batch_by_stage"].values()) for r in rows]
        ours = [predicted_rank(pp, m, name, r["rank"])["activations"] for r in rows]
        errors = [(z - r["total"]) / r["total"] for z, r in zip(ours, rows, strict=True)]
        cells = [[str(r["in_flight"]) for r in rows], [str(r["order_in_flight"]) for r in rows],
                 [f"{r['activations']:,}" for r in rows], [f"{x:.2f}" for x in ratio],
                 [f"{r['total']:,}" for r in rows], [f"{e:+.2%}" for e in errors]]
        lines.append(f"| {pp} | {m} | {name} | " + " | ".join("; ".join(c) for c in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        print(table())
    else:
        main()
