"""Measure checkpointing policies and loss variants as training stacks run them, and compare with zeroplan.

Extends validation/measure_activations.py (same model configs, same measured quantity; read its docstring) to:

  every:N       HF gradient checkpointing (non-reentrant torch.utils.checkpoint) left on only for layers N, 2N, ...
                (torchtitan layer SAC, selective_ac_option = N)
  selective-op  torch.utils.checkpoint with context_fn = create_selective_checkpoint_contexts(policy), the policy
                torchtitan's SelectiveAC (pytorch/torchtitan@b5bcd76c66d0acb1a08b176d9639425bc55e0b2a:
                torchtitan/distributed/activation_checkpoint.py lines 31-94, 243-287), reproduced below. Its
                outputs kept are read from a dispatch mode inside the checkpoint's forward context.
  losses        hf (the model's own labels loss), no-upcast (the same loss without .float()), chunked (torchtune
                CEWithChunkedOutputLoss + TransformerDecoder.chunked_output, reimplemented from
                pytorch/torchtune@bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1: torchtune/modules/loss/
                ce_chunked_output_loss.py lines 40-102, torchtune/modules/transformer.py lines 495-513: torchtune
                is not installed here). Liger's fused linear cross-entropy is a Triton kernel: not measured.

CPU stand-in: HF's SDPA on the CPU runs aten._scaled_dot_product_flash_attention_for_cpu, which the policy saves
as it saves the CUDA flash / efficient kernels (same outputs: attention output and log-sum-exp).

Recompute (what one layer's backward recompute allocates): measured on the same case without checkpointing, as in
measure_activations.py; for selective-op less the storages of that layer's saved set that are outputs of the ops
the policy keeps (those come back from the checkpoint's cache, not from a recompute).

    python validation/measure_checkpointing.py              # summary on stdout
    python validation/measure_checkpointing.py --write-docs # regenerate the table in docs/activations.md
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import (
    CheckpointPolicy,
    SelectiveCheckpointContext,
    create_selective_checkpoint_contexts,
)
from transformers.modeling_layers import GradientCheckpointingLayer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from validation import measure_activations as base
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.setup import (
    Loss,
    TrainingSetup,
    parse_checkpointing,
)

TOLERANCE = 0.02  # the bar for every measured case
DOCS = base.DOCS
BEGIN, END = "<!-- BEGIN checkpointing (validation/measure_checkpointing.py --write-docs) -->", "<!-- END checkpointing -->"
LAYERS = 4  # enough for every:2 and every:3 to leave layers on both sides
# llama-v128: a vocabulary small enough that one layer's recompute outgrows the 16-bit loss copy it follows
base.FAMILIES.setdefault("llama-v128", ("llama", base._LLAMA | dict(vocab_size=128)))
base.FAMILIES.setdefault("mistral", ("mistral", base._LLAMA | dict(num_key_value_heads=2, sliding_window=None)))
FAMILIES = ("llama", "llama-gqa", "qwen2", "mistral", "llama-v128")
POLICIES = ("every:2", "every:3", "selective-op")
LOSSES = (Loss.no_upcast, Loss.chunked)
TORCHTUNE_CHUNKS = 8  # CEWithChunkedOutputLoss(num_output_chunks=8)


# --- torchtitan's SelectiveAC policy, as written at the commit above -----------------------------------------
def _default_save_ops() -> set:
    from torch._functorch.partitioners import (
        get_default_op_list,  # what torchtitan's _get_default_save_ops reads
    )

    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    ops |= {torch.ops.aten._scaled_dot_product_cudnn_attention.default,
            torch.ops.aten._scaled_dot_product_attention_math.default,
            torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default,
            torch.ops.aten.max.default, torch.ops.aten.linear.default, torch.ops.aten.topk.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default,
            torch.ops._c10d_functional.all_to_all_single.default}
    ops.add(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)  # the CPU stand-in (docstring)
    return ops


SAVE_OPS = _default_save_ops()
MM_OPS = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)
SAVE = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)


def torchtitan_policy(observe=None):
    """SelectiveAC._wrap_block's wrapped_policy (force_recompute_mm_shapes_by_fqns matches no HF module name)."""
    meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

    def wrapped_policy(ctx, func, *args, **kwargs) -> CheckpointPolicy:
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func in MM_OPS:
            meta[key] += 1
        if func in SAVE_OPS:
            policy = (CheckpointPolicy.PREFER_RECOMPUTE if func in MM_OPS and meta[key] % 2 == 0
                      else CheckpointPolicy.MUST_SAVE)
        else:
            policy = CheckpointPolicy.PREFER_RECOMPUTE
        if observe is not None and not ctx.is_recompute:
            observe.last = policy
        return policy

    return wrapped_policy


class Recorder(base.Recorder):
    """base.Recorder holding what it records until the measurement ends, as the graph of a loss about to be
    back-propagated does: no storage is freed mid-forward and its address taken by another (keys are data_ptr)."""

    def __init__(self, model):
        super().__init__(model)
        self.refs: list[torch.Tensor] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        self.refs.append(t)
        return super().pack(t)


class KeptRecorder(TorchDispatchMode):
    """Above SAC's caching mode: the storages of the outputs the policy told it to keep (self.kept)."""

    def __init__(self, rec: base.Recorder, kept: dict[int, int]):
        super().__init__()
        self.rec, self.kept, self.last = rec, kept, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.last = None
        out = func(*args, **(kwargs or {}))
        if self.last in SAVE:
            for t in base._tensors(out):
                self.rec.refs.append(t)
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.rec.params:
                    self.kept.setdefault(ptr, t.untyped_storage().nbytes())
        return out


class WouldKeep(TorchDispatchMode):
    """In a run without checkpointing: per layer, the storages the policy would keep (for the recompute)."""

    def __init__(self, rec: base.Recorder):
        super().__init__()
        self.rec, self.by_layer, self.policy, self.layer = rec, {}, None, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        layer = self.rec.layer
        if layer is None:
            return out
        if layer != self.layer:
            self.layer, self.policy = layer, torchtitan_policy()
        if self.policy(SelectiveCheckpointContext(is_recompute=False), func, *args, **(kwargs or {})) in SAVE:
            for t in base._tensors(out):
                self.rec.refs.append(t)
                self.by_layer.setdefault(layer, set()).add(t.untyped_storage().data_ptr())
        return out


@dataclass(frozen=True)
class Case:
    family: str
    dtype: str
    attention: str
    checkpointing: str  # none, every:N, selective-op
    loss: Loss
    seq_len: int
    micro_batch: int

    @property
    def key(self) -> tuple:
        return (self.family, self.dtype, self.attention, self.seq_len, self.micro_batch)


@functools.cache
def build(family: str, dtype: str, attention: str):
    model_type, kw = base.FAMILIES[family]
    kw = kw | dict(num_hidden_layers=LAYERS)
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(0)
    impl = f"zp_{'fused' if attention == 'sdpa' else 'eager'}"
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=impl).to(base.DTYPES[dtype][0])
    model.train()
    return model, base.architecture(model_type, kw)


def _configure(model, checkpointing: str, rec: base.Recorder, kept: dict[int, int]) -> None:
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if checkpointing == "none":
        model.gradient_checkpointing_disable()
        return
    if checkpointing == "selective-op":
        def context_fn():
            recorder = KeptRecorder(rec, kept)
            caching, recompute = create_selective_checkpoint_contexts(torchtitan_policy(recorder))
            stack = contextlib.ExitStack()
            stack.enter_context(caching)
            stack.enter_context(recorder)
            return stack, recompute

        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False,
                                                                           "context_fn": context_fn})
        return
    _, every = parse_checkpointing(checkpointing)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for i, layer in enumerate(layers):
        layer.gradient_checkpointing = (i + 1) % every == 0


def _loss(model, ids: torch.Tensor, loss: Loss):
    """(the logits tensors the forward keeps, the fp32 copy's bytes at its largest, the loss)."""
    vocab = model.config.vocab_size
    if loss is Loss.hf:
        out = model(input_ids=ids, labels=ids.clone(), use_cache=False)
        upcast = out.logits.dtype != torch.float32
        return [out.logits], out.logits.numel() * 4 if upcast else 0, out.loss
    if loss is Loss.no_upcast:  # ForCausalLMLoss (transformers loss/loss_utils.py) without logits.float()
        out = model(input_ids=ids, use_cache=False)
        labels = F.pad(ids.clone(), (0, 1), value=-100)[..., 1:].contiguous()
        loss_ = F.cross_entropy(out.logits.view(-1, vocab), labels.view(-1), ignore_index=-100, reduction="sum")
        return [out.logits], 0, loss_
    # torchtune: chunked_output, then CEWithChunkedOutputLoss.forward / compute_cross_entropy (eager)
    hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
    chunks = [model.lm_head(c) for c in hidden.tensor_split(TORCHTUNE_CHUNKS, dim=1)]
    labels = ids.clone()
    total = (labels != -100).sum()
    label_chunks = [c.reshape(-1) for c in labels.tensor_split(TORCHTUNE_CHUNKS, dim=1)]
    total_loss = 0.0
    for logits_chunk, labels_chunk in zip([c.reshape(-1, c.size(-1)) for c in chunks], label_chunks):
        total_loss += F.cross_entropy(logits_chunk.float(), labels_chunk, ignore_index=-100, reduction="sum")
    copy = max(c.numel() for c in chunks) * 4 if chunks[0].dtype != torch.float32 else 0
    return chunks, copy, total_loss / total


def measure(case: Case):
    model, arch = build(case.family, case.dtype, case.attention)
    rec = base.RECORDER = Recorder(model)
    kept: dict[int, int] = {}
    _configure(model, case.checkpointing, rec, kept)
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    hooks = []
    for i, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(functools.partial(base._enter_layer, rec, i), with_kwargs=True))
        hooks.append(layer.register_forward_hook(lambda *_: setattr(rec, "layer", None)))
    would = WouldKeep(rec)
    torch.manual_seed(1)
    ids = torch.randint(1, arch.vocab_size, (case.micro_batch, case.seq_len))
    try:
        with base.cuda_like_dropout(), torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t), \
                (would if case.checkpointing == "none" else contextlib.nullcontext()):
            logits, copy, _loss_value = _loss(model, ids, case.loss)  # kept: its graph holds the saved tensors
    finally:
        base.RECORDER = None
        for h in hooks:
            h.remove()
        model.gradient_checkpointing_disable()
    if case.checkpointing == "selective-op" and not kept:
        raise RuntimeError(f"{case}: the checkpoint kept nothing: the policy did not run")
    held = {p: n for p, n in rec.held.items() if p not in rec.saved}
    kept_only = {p: n for p, n in kept.items() if p not in rec.saved and p not in held}
    logit_bytes = sum(t.untyped_storage().nbytes() for t in logits if t.untyped_storage().data_ptr() not in rec.saved)
    forward = sum(rec.saved.values()) + sum(held.values()) + sum(kept_only.values()) + logit_bytes
    return dict(forward=forward, copy=copy, recompute_layer=rec.recompute_layer_bytes(),
                recompute_op=_recompute_op(rec, would)), arch


def _recompute_op(rec: base.Recorder, would: WouldKeep) -> int:
    """Largest over layers: storages only that layer saved, less its input, less what the policy keeps."""
    per: dict[int, int] = {}
    for ptr, layers in rec.layers_of.items():
        if len(layers) != 1:
            continue
        (layer,) = layers
        if ptr != rec.layer_inputs.get(layer) and ptr not in would.by_layer.get(layer, set()):
            per[layer] = per.get(layer, 0) + rec.saved[ptr]
    return max(per.values(), default=0)


def total(case: Case, m: dict, reference: dict, arch) -> int:
    if case.checkpointing == "none":
        return m["forward"] + m["copy"]
    if case.checkpointing == "selective-op":
        return m["forward"] + max(m["copy"], reference["recompute_op"])
    _, every = parse_checkpointing(case.checkpointing)
    wraps = any((i + 1) % every == 0 for i in range(arch.num_layers))
    return m["forward"] + max(m["copy"], reference["recompute_layer"] if wraps else 0)


def predicted(arch, case: Case) -> int:
    mode, every = parse_checkpointing(case.checkpointing)
    setup = TrainingSetup(precision=base.DTYPES[case.dtype][1], seq_len=case.seq_len, micro_batch=case.micro_batch,
                          checkpointing=mode, checkpoint_every=every, attention=base.ATTENTIONS[case.attention],
                          loss=case.loss)
    return activation_bytes(arch, setup).total_bytes


def grid(families=None, quick: bool = False):
    seqs, batches = (base.SEQ_LENS[:1], base.MICRO_BATCHES[-1:]) if quick else (base.SEQ_LENS, base.MICRO_BATCHES)
    for fam, dt, attn, s, b in itertools.product(families or FAMILIES, base.DTYPES, base.ATTENTIONS, seqs, batches):
        yield Case(fam, dt, attn, "none", Loss.hf, s, b)  # first: the reference for the recompute
        for policy in POLICIES:
            yield Case(fam, dt, attn, policy, Loss.hf, s, b)
        if attn == "sdpa":
            for loss in LOSSES:
                yield Case(fam, dt, attn, "none", loss, s, b)


def run(cases):
    rows, reference = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        for case in cases:
            m, arch = measure(case)
            if case.checkpointing == "none" and case.loss is Loss.hf:
                reference[case.key] = m
            rows.append((case, total(case, m, reference[case.key], arch), predicted(arch, case)))
    return rows


def markdown(rows) -> str:
    lines = ["| family | attention | checkpointing | loss | dtype | b | s | measured B | predicted B | error |",
             "|---|---|---|---|---|---|---|---:|---:|---:|"]
    for c, m, p in rows:
        lines.append(f"| {c.family} | {c.attention} | {c.checkpointing} | {c.loss.value} | {c.dtype} | {c.micro_batch} "
                     f"| {c.seq_len} | {m:,} | {p:,} | {100 * base.error(m, p):+.3f}% |")
    return "\n".join(lines)


def summary(rows) -> str:
    lines = ["| checkpointing | loss | cases | max abs error | worst case |", "|---|---|---:|---:|---|"]
    groups = sorted({(c.checkpointing, c.loss.value) for c, _, _ in rows})
    for ckpt, loss in groups:
        mine = [r for r in rows if (r[0].checkpointing, r[0].loss.value) == (ckpt, loss)]
        worst = max(mine, key=lambda r: abs(base.error(r[1], r[2])))
        c = worst[0]
        lines.append(f"| {ckpt} | {loss} | {len(mine)} | {100 * abs(base.error(worst[1], worst[2])):.3f}% | "
                     f"{c.family}, {c.attention}, {c.dtype}, b={c.micro_batch}, s={c.seq_len} |")
    return "\n".join(lines)


def write_docs(rows) -> None:
    text = DOCS.read_text()
    head = (f"Generated by `python validation/measure_checkpointing.py --write-docs` with torch {torch.__version__}, "
            f"transformers {transformers.__version__}; {len(rows)} cases, {LAYERS}-layer models.\n\n")
    body = (f"{BEGIN}\n{head}{summary(rows)}\n\n<details><summary>All cases</summary>\n\n{markdown(rows)}\n\n"
            f"</details>\n{END}")
    if BEGIN not in text:
        raise SystemExit(f"{DOCS} has no {BEGIN} marker")
    DOCS.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: body, text, flags=re.DOTALL))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", choices=list(FAMILIES))
    parser.add_argument("--quick", action="store_true", help="one sequence length and micro-batch")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    rows = run(grid(args.family, args.quick))
    print(markdown(rows) if args.verbose else summary(rows))
    worst = max(abs(base.error(m, p)) for _, m, p in rows)
    print(f"\n{len(rows)} cases in {time.perf_counter() - start:.1f} s; worst error {100 * worst:.3f}%")
    if args.write_docs:
        write_docs(rows)
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
