"""Run DDP, DDP + ZeroRedundancyOptimizer, FSDP1 and FSDP2 for real on CPU and count each rank's bytes.

A small GPT-2-shaped model in plain PyTorch (the tensors transformers' GPT2LMHeadModel builds: Conv1D
weights are (in, out), tied LM head) trains a few AdamW steps on the gloo backend with N = 1..4
processes. Per rank, after backward and after the optimizer step of the last step, it counts unique
storages (by data pointer, at their current size) of:

- parameters: every storage the module's parameters point at, plus what the engine holds for them
  (FSDP1 FlatParameter `_local_shard`, `_full_param_padded`, `_mp_shard`; FSDP2 FSDPParam sharded data,
  all-gather outputs and unsharded parameters);
- gradients: the `.grad` of every parameter (FSDP1: of the FlatParameters; FSDP2: the local shards);
- optimizer states: every tensor in `optimizer.state` (ZeroRedundancyOptimizer: this rank's `optim`);
- engine buffers: DDP's gradient buckets (not reachable from Python: the size DDP reports in
  `_get_ddp_logging_data()["bucket_sizes"]`, unless `gradient_as_bucket_view` makes them the grads);
  FSDP2's retained all-gather and reduce-scatter staging tensors.

The peak of parameter bytes during forward/backward is sampled after every aten op through a
TorchDispatchMode (CPU has no allocator statistics); it covers the gathered units, not activations.

Run from the repository root:  python validation/measure_engines.py [--quick] [--markdown docs/engines_table.md]
It prints one row per (config, N) with measured (busiest rank) and predicted bytes and the errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

VOCAB, POSITIONS, HIDDEN, LAYERS, HEADS = 1000, 64, 64, 4, 4
SEQ, BATCH, STEPS = 32, 2, 3

# (name, engine, zeroplan stage, options)
CONFIGS = [
    ("ddp", "ddp", 0, {}),
    ("ddp bucket-view", "ddp", 0, {"gradient_as_bucket_view": True}),
    ("ddp+zero", "ddp", 1, {}),
    ("fsdp SHARD_GRAD_OP", "fsdp", 2, {}),
    ("fsdp FULL_SHARD", "fsdp", 3, {}),
    ("fsdp2 reshard=False", "fsdp2", 2, {}),
    ("fsdp2 reshard=True", "fsdp2", 3, {}),
]
PRECISIONS = ("fp32", "bf16-mixed")


class Conv1D(nn.Module):
    """transformers' GPT-2 Conv1D: weight (in, out), y = x W + b."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = Conv1D(d, 3 * d), Conv1D(d, d)
        self.c_fc, self.mlp_proj = Conv1D(d, 4 * d), Conv1D(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, HEADS, d // HEADS).transpose(1, 2) for t in (q, k, v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp_proj(nn.functional.gelu(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(POSITIONS, HIDDEN)
        self.h = nn.ModuleList(Block(HIDDEN) for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(HIDDEN)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.h:
            x = block(x)
        logits = nn.functional.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return nn.functional.cross_entropy(logits.float().view(-1, VOCAB), idx.view(-1))


def _tensors_of(t) -> list[torch.Tensor]:
    if t is None:
        return []
    local = getattr(t, "_local_tensor", None)  # DTensor
    return [local if local is not None else t]


def _bytes(tensors, seen: set[int] | None = None) -> int:
    """Bytes of the unique storages (data pointer, current size) behind `tensors`, skipping those in `seen`."""
    seen = set() if seen is None else seen
    total = 0
    for t in tensors:
        for x in _tensors_of(t):
            st = x.untyped_storage()
            if st.nbytes() > 0 and st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                total += st.nbytes()
    return total


class Probe:
    """What one rank's engine holds, by category, reachable from Python."""

    def __init__(self, engine: str, model: nn.Module, wrapped: nn.Module, optimizer, options: dict):
        self.engine, self.model, self.wrapped, self.optimizer, self.options = engine, model, wrapped, optimizer, options
        self.handles = []
        self.groups = []
        self._ddp_buckets: int | None = None
        if engine == "fsdp":
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            self.handles = [m._handle for m in wrapped.modules() if isinstance(m, FSDP) and m._handle is not None]
        if engine == "fsdp2":
            for m in model.modules():
                state = m._get_fsdp_state() if hasattr(m, "_get_fsdp_state") else None
                if state is not None and state._fsdp_param_group is not None:
                    self.groups.append(state._fsdp_param_group)

    def params(self) -> list[torch.Tensor]:
        out = list(self.model.parameters())
        for h in self.handles:
            fp = h.flat_param
            out += [fp] + [getattr(fp, a) for a in ("_local_shard", "_full_param_padded", "_mp_shard") if hasattr(fp, a)]
        for g in self.groups:
            for fp in g.fsdp_params:
                out += [fp._sharded_param_data, fp.sharded_param]
                out += list(getattr(fp, "all_gather_outputs", []) or [])
                if hasattr(fp, "_unsharded_param"):
                    out.append(fp._unsharded_param)
            result = getattr(g, "_all_gather_result", None)
            if result is not None:
                out.append(result.all_gather_output)
            state = g.comm_ctx.all_gather_state
            if state is not None:
                out.append(state.all_gather_result.all_gather_output)
        return out

    def grads(self) -> list[torch.Tensor]:
        out = [p.grad for p in self.model.parameters()]
        for h in self.handles:  # FSDP1: the unsharded grad in backward, the reduced shard it keeps after
            out += [h.flat_param.grad, getattr(h.flat_param, "_saved_grad_shard", None)]
        for g in self.groups:  # FSDP2: a unit's unsharded grads, until its reduce-scatter copies them out
            for fp in g.fsdp_params:
                if hasattr(fp, "_unsharded_param"):
                    out += [fp._unsharded_param.grad, getattr(fp, "unsharded_accumulated_grad", None)]
        return [g for g in out if g is not None]

    def optimizer_states(self) -> list[torch.Tensor]:
        opt = getattr(self.optimizer, "optim", self.optimizer)  # ZeroRedundancyOptimizer wraps the local one
        return [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]

    def buffers(self) -> list[torch.Tensor]:
        total = []
        for g in self.groups[:1]:  # the comm context is shared by all groups
            total += [rs.reduce_scatter_input for rs in g.comm_ctx.reduce_scatter_states]
        return total

    def ddp_bucket_bytes(self) -> int:
        """DDP's buckets are not reachable from Python: the size DDP reports (allocated at construction, fixed)."""
        if self.engine != "ddp" or self.options.get("gradient_as_bucket_view"):
            return 0
        if self._ddp_buckets is None:
            sizes = self.wrapped._get_ddp_logging_data().get("bucket_sizes", "")
            self._ddp_buckets = sum(int(x) for x in str(sizes).split(",") if x.strip())
        return self._ddp_buckets

    def snapshot(self, seen: set[int] | None = None) -> dict[str, int]:
        """Bytes per category; a storage reachable from two categories counts once, in the first."""
        seen = set() if seen is None else seen
        out = {}
        for key, tensors in (("parameters", self.params()), ("gradients", self.grads()),
                             ("optimizer_states", self.optimizer_states()), ("buffers", self.buffers())):
            out[key] = _bytes(tensors, seen)
        out["buffers"] += self.ddp_bucket_bytes()
        return out


CATEGORIES = ("parameters", "gradients", "optimizer_states", "buffers")


class StepTracker(TorchDispatchMode):
    """Op by op through one step: after every aten op, what the probe reaches, by category, and the moment.

    CPU PyTorch has no allocator statistics (torch.cuda.max_memory_allocated has no CPU twin), so the tracker
    samples instead: every aten op the step dispatches passes through this mode, and after each one it
    counts the unique storages the probe reaches (parameters, gradients, optimizer states, engine buffers;
    a storage once, in its first category). Memory changes only inside ops, so the largest sample is the
    peak of what the probe reaches. The moment is a label set by hooks (`label_moments`): the layer whose
    forward or backward is running, the loss, the optimizer step. Activations and the temporaries of an op
    are not reachable and not counted (validation/measure_activations.py measures activations).
    """

    def __init__(self, probe: Probe):
        super().__init__()
        self.probe, self.moment = probe, "start of step"
        self.peak, self.peak_moment, self.peak_bytes, self.param_peak = 0, "", {}, 0
        self.by_moment: dict[str, int] = {}
        self.made: list = []  # weak references to what the optimizer step's ops return
        self.step_temporaries, self.step_with_temporaries = 0, 0

    def at(self, moment: str) -> None:
        if ACTIVE and ACTIVE[0] is self:
            self.moment = moment
            self.sample()

    def sample(self) -> None:
        seen: set[int] = set()
        snap = self.probe.snapshot(seen)
        total = sum(snap.values())
        if self.made:  # the optimizer step's temporaries: tensors its ops made, still alive, reachable from none
            temp = _bytes([t for t in (r() for r in self.made) if t is not None], seen)
            self.step_temporaries = max(self.step_temporaries, temp)
            self.step_with_temporaries = max(self.step_with_temporaries, total + temp)
        self.param_peak = max(self.param_peak, snap["parameters"])
        self.by_moment[self.moment] = max(self.by_moment.get(self.moment, 0), total)
        if total > self.peak:
            self.peak, self.peak_moment, self.peak_bytes = total, self.moment, snap

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.moment == "optimizer step":
            self.made += [weakref.ref(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.sample()
        return out


ACTIVE: list[StepTracker] = []  # the tracker the hooks report to (none outside the measured step)


def _mark(moment: str) -> None:
    if ACTIVE:
        ACTIVE[0].at(moment)


def label_moments(model: nn.Module) -> None:
    """Hooks that name the moment: a block's forward pre-hook ("forward of layer i"); a gradient hook on its
    output, which fires when its backward starts ("backward of layer i"); one on the first block's input
    ("backward of the embedding"); the final norm's forward ("end of forward": head and loss)."""
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    wrappers = {id(getattr(m, "_fsdp_wrapped_module", None)): m for m in model.modules()}
    for i, block in enumerate(blocks):
        outer = wrappers.get(id(block), block)  # FSDP1's wrapper gathers before the block runs: label it first
        def pre(module, args, i=i):
            _mark(f"forward of layer {i}")
            if i == 0 and args[0].requires_grad:
                args[0].register_hook(lambda g: _mark("backward of the embedding"))

        def post(module, args, out, i=i):
            if out.requires_grad:
                out.register_hook(lambda g, i=i: _mark(f"backward of layer {i}"))

        outer.register_forward_pre_hook(pre, prepend=True)
        block.register_forward_hook(post)
    ln_f = next(m for m in model.modules() if isinstance(m, GPT2)).ln_f
    ln_f.register_forward_pre_hook(lambda module, args: _mark("end of forward"), prepend=True)


def build(engine: str, stage: int, precision: str, options: dict, world: int):
    torch.manual_seed(0)
    model = GPT2()
    bf16 = precision == "bf16-mixed"
    if engine == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        wrapped = DDP(model, gradient_as_bucket_view=options.get("gradient_as_bucket_view", False))
        if stage == 1:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3, foreach=True)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        return model, wrapped, opt
    if engine == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        strategy = {2: ShardingStrategy.SHARD_GRAD_OP, 3: ShardingStrategy.FULL_SHARD}[stage]
        mpol = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if bf16 else None
        wrapped = FSDP(model, sharding_strategy=strategy, auto_wrap_policy=ModuleWrapPolicy({Block}),
                       mixed_precision=mpol, device_id=torch.device("cpu"), sync_module_states=False)
        return model, wrapped, torch.optim.AdamW(wrapped.parameters(), lr=1e-3, foreach=True)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reshard = stage == 3
    mpol = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) if bf16 else MixedPrecisionPolicy()
    for block in model.h:
        fully_shard(block, reshard_after_forward=reshard, mp_policy=mpol)
    fully_shard(model, reshard_after_forward=reshard, mp_policy=mpol)
    return model, model, torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)


def worker(rank: int, world: int, port: int, jobs: list, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = []
    for name, engine, stage, options, precision in jobs:
        model, wrapped, opt = build(engine, stage, precision, options, world)
        probe = Probe(engine, model, wrapped, opt, options)
        idx = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(rank))
        autocast = engine == "ddp" and precision == "bf16-mixed"
        label_moments(model)
        for step in range(STEPS):
            tracker = StepTracker(probe)
            last = step == STEPS - 1  # the last step, with optimizer states already allocated, is measured
            if last:
                ACTIVE.append(tracker)
            with tracker if last else contextlib.nullcontext():
                tracker.at("start of step")
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = wrapped(idx)
                tracker.at("backward of the loss")
                loss.backward()
                after_backward = probe.snapshot()
                tracker.at("optimizer step")
                opt.step()
                after_step = probe.snapshot()
                opt.zero_grad(set_to_none=True)
            ACTIVE.clear()
        results.append({"name": name, "engine": engine, "stage": stage, "precision": precision, "rank": rank,
                        "after_backward": after_backward, "after_step": after_step, "param_peak": tracker.param_peak,
                        "peak": {"total": tracker.peak, "moment": tracker.peak_moment, "bytes": tracker.peak_bytes},
                        "by_moment": tracker.by_moment, "step_temporaries": tracker.step_temporaries,
                        "step_with_temporaries": tracker.step_with_temporaries})
        del model, wrapped, opt, probe
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def measure(world: int, jobs: list) -> list[dict]:
    """Every job at one world size; one row per (job, rank)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(world, port, jobs, tmp), nprocs=world, join=True)
        return [row for r in range(world) for row in json.loads(Path(tmp, f"rank{r}.json").read_text())]


def predicted(engine: str, stage: int, precision: str, options: dict, world: int):
    """zeroplan's StageBase for the same model and run."""
    from zeroplan.memory.engines import EngineOptions, engine_stage_base, layout_for
    from zeroplan.memory.summary import summarize_model
    from zeroplan.memory.recipes import make_recipe
    from zeroplan.memory.setup import (
        DeepSpeedKnobs,
        Optimizer,
        Parallelism,
        Precision,
        ZeroStage,
    )
    from zeroplan.models.families import GPT2Config
    from zeroplan.models.params import count_params

    config = GPT2Config(model_type="gpt2", vocab_size=VOCAB, n_positions=POSITIONS, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS)
    counts = count_params(config)
    summary = summarize_model("validation-gpt2", counts, config.architecture(), DeepSpeedKnobs())
    recipe = make_recipe(Precision(precision), Optimizer.adamw)
    return engine_stage_base(engine, summary, layout_for(config), recipe, ZeroStage(stage), Parallelism(gpus=world),
                             DeepSpeedKnobs(), EngineOptions(**options))


def compare(rows: list[dict]) -> list[dict]:
    """Per (config, precision, N): the busiest measured rank, zeroplan's figures and the worst error over ranks."""
    from zeroplan.memory.engines import param_peak_bytes

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["name"], r["precision"], r["world"]), []).append(r)
    table = []
    for (name, precision, world), ranks in groups.items():
        cfg = next(c for c in CONFIGS if c[0] == name)
        base = predicted(cfg[1], cfg[2], precision, cfg[3], world)
        pred_states = base.states.total
        pred_bufs = sum(t.bytes for t in base.buffers if t.phase.value == "always")
        pred_peak = param_peak_bytes(base)
        def err(m, p):
            return abs(p - m) / m if m else (0.0 if p == 0 else float("inf"))
        measured_states = [r["after_step"]["parameters"] + r["after_step"]["gradients"] + r["after_step"]["optimizer_states"] for r in ranks]
        measured_bufs = [r["after_step"]["buffers"] for r in ranks]
        peaks = [r["param_peak"] for r in ranks]
        from zeroplan.memory.stage import stage_peak

        events = stage_peak(base, 0).timeline.events  # no activations: the tracker counts none
        held = [e.total - e.by_category()["temporaries"] for e in events]  # the tracker's four categories
        first = held.index(max(held))
        busiest = max(ranks, key=lambda r: r["peak"]["total"])
        step_event = events[-1]
        table.append({
            "config": name, "precision": precision, "N": world,
            "states_measured_max": max(measured_states), "states_measured_min": min(measured_states),
            "states_predicted": pred_states, "states_err": max(err(m, pred_states) for m in measured_states),
            "buffers_measured": max(measured_bufs), "buffers_predicted": pred_bufs,
            "peak_measured": max(peaks), "peak_predicted": pred_peak, "peak_err": max(err(m, pred_peak) for m in peaks),
            "detail": ranks[int(max(range(len(ranks)), key=lambda i: measured_states[i]))]["after_step"],
            "step_peak_measured": busiest["peak"]["total"], "step_peak_moment_measured": busiest["peak"]["moment"],
            "step_peak_predicted": held[first], "step_peak_moment_predicted": events[first].name,
            "step_peak_err": err(busiest["peak"]["total"], held[first]),
            "opt_step_measured": max(r["step_with_temporaries"] for r in ranks), "opt_step_predicted": step_event.total,
            "opt_temp_measured": max(r["step_temporaries"] for r in ranks),
            "opt_temp_predicted": step_event.by_category()["temporaries"],
            "opt_step_err": err(max(r["step_with_temporaries"] for r in ranks), step_event.total),
        })
    return table


def markdown(table: list[dict]) -> str:
    head = ("| config | precision | N | model states measured (busiest rank; min) | predicted | error "
            "| engine buffers measured / predicted | param peak fwd/bwd measured | predicted | error |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    lines = [
        f"| {t['config']} | {t['precision']} | {t['N']} | {t['states_measured_max']:,} ({t['states_measured_min']:,}) "
        f"| {t['states_predicted']:,} | {t['states_err']:.2%} | {t['buffers_measured']:,} / {t['buffers_predicted']:,} "
        f"| {t['peak_measured']:,} | {t['peak_predicted']:,} | {t['peak_err']:.2%} |"
        for t in table
    ]
    return head + "\n".join(lines) + "\n"


def step_markdown(table: list[dict]) -> str:
    """The step's peak of parameters + gradients + optimizer states + buffers, busiest rank, and its moment."""
    head = ("| config | precision | N | step peak measured (busiest rank) | at | predicted (timeline) | at | error "
            "| optimizer step with temporaries measured / predicted (temporaries) | error |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    lines = [
        f"| {t['config']} | {t['precision']} | {t['N']} | {t['step_peak_measured']:,} | {t['step_peak_moment_measured']} "
        f"| {t['step_peak_predicted']:,} | {t['step_peak_moment_predicted']}"
        f"{'' if t['step_peak_moment_measured'] == t['step_peak_moment_predicted'] else ' (differs)'} "
        f"| {t['step_peak_err']:.2%} | {t['opt_step_measured']:,} / {t['opt_step_predicted']:,} "
        f"({t['opt_temp_measured']:,} / {t['opt_temp_predicted']:,}) | {t['opt_step_err']:.2%} |"
        for t in table
    ]
    return head + "\n".join(lines) + "\n"


def run(worlds=(1, 2, 3, 4), configs=None, precisions=PRECISIONS) -> list[dict]:
    jobs_all = [(n, e, s, o, p) for (n, e, s, o) in (configs or CONFIGS) for p in precisions]
    rows = []
    for world in worlds:
        for r in measure(world, jobs_all):
            rows.append({**r, "world": world})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", default="1,2,3,4")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--json", help="write the raw per-rank rows here")
    args = ap.parse_args()
    rows = run(tuple(int(w) for w in args.worlds.split(",")))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    table = compare(rows)
    text = markdown(table) + "\n" + step_markdown(table)
    print(text)
    moments = sum(t["step_peak_moment_measured"] == t["step_peak_moment_predicted"] for t in table)
    print(f"max model-state error {max(t['states_err'] for t in table):.2%}, "
          f"max param-peak error {max(t['peak_err'] for t in table):.2%}, "
          f"max step-peak error {max(t['step_peak_err'] for t in table):.2%}, moments right {moments}/{len(table)}, "
          f"max optimizer-step error {max(t['opt_step_err'] for t in table):.2%}")
    if args.markdown:
        Path(args.markdown).write_text(text)


if __name__ == "__main__":
    main()
