"""Measure DPO's reference forward as TRL's DPOTrainer runs it, and compare with zeroplan's terms (memory.reference).

Needs a CPU build of PyTorch and transformers (TRL is not needed: its step order is reproduced with torch). The step,
as huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8 trl/trainer/dpo_trainer.py `_compute_loss` runs it:
the policy forward on the chosen and rejected rows concatenated (2 x micro-batch sequences), the per-token
log-probs of its logits, then under torch.no_grad() the reference model's forward on the same rows and its
log-probs. The reference is a frozen deep copy of the policy (no peft) or the policy itself (peft's adapter-disabled
base: the same forward, so measured once).

Measured quantity (CPU stand-in for the CUDA allocator): every storage an aten op returns is tracked by a weak
reference (torch.multiprocessing.reductions.StorageWeakRef) from the start of the step; after each op the bytes of
the storages still alive are summed. Parameters and inputs, made before the step, are not counted.
  policy     live bytes when the reference forward starts (the policy's saved activations, logits, log-probs)
  reference  the largest live bytes during the reference forward and its log-probs, less `policy`
  zeroplan   memory.reference.reference_forward_bytes on the doubled batch without checkpointing
  in-op      of zeroplan's, what no dispatch-level count sees: fp32 logits' log-probs go through torch.logsumexp,
             whose kernel makes exp(x - max) the logits' size inside the op (pytorch aten/src/ATen/native/
             ReduceOps.cpp logsumexp_out_impl); modelled from that source, compared as zeroplan less it
  copy       the reference copy's parameter bytes against reference_parameter_bytes (ZeRO-0, one GPU)

    python validation/measure_reference.py              # table on stdout
    python validation/measure_reference.py --write-docs # regenerate the table in docs/finetune.md
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from validation import measure_activations as base
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.reference import forwarded_setup, reference_forward_bytes, reference_parameter_bytes
from zeroplan.memory.setup import (
    Checkpointing,
    Engine,
    PostTraining,
    Precision,
    TrainingSetup,
    ZeroStage,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "finetune.md"
BEGIN, END = "<!-- BEGIN measured (validation/measure_reference.py --write-docs) -->", "<!-- END measured reference -->"
TOLERANCE = 0.20  # never below the measured transient; above it by at most 20% (the no-grad layer bound)
CASES = [(seq, mb, vocab, dtype) for dtype in ("bf16", "fp32") for seq in (32, 64) for mb in (1, 2)
         for vocab in (1000, 8000)]
PRECISIONS = {"bf16": Precision.bf16_mixed, "fp32": Precision.fp32}


class LiveBytes(TorchDispatchMode):
    """Sums the bytes of the storages the ops made that are still alive, after every op; keeps the largest."""

    def __init__(self, *made_before):
        super().__init__()
        # parameters and inputs: an op returning a view of one (a weight's transpose) shares its storage
        self.before = {t.untyped_storage().data_ptr() for t in made_before}
        self.refs: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = 0

    def live(self) -> int:
        self.refs = {k: v for k, v in self.refs.items() if not v[0].expired()}
        return sum(n for _, n in self.refs.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                key = s.data_ptr()
                if key and key not in self.before and (key not in self.refs or self.refs[key][0].expired()):
                    self.refs[key] = (StorageWeakRef(s), s.nbytes())
        self.peak = max(self.peak, self.live())
        return out


def token_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token log-probs of `labels`, one row at a time for 16-bit logits (TRL's selective_log_softmax's rule)."""
    if logits.dtype in (torch.float32, torch.float64):
        picked = torch.gather(logits, -1, labels.unsqueeze(-1)).squeeze(-1)
        return picked - torch.logsumexp(logits, dim=-1)
    rows = [torch.gather(r.log_softmax(-1), -1, lab.unsqueeze(-1)).squeeze(-1) for r, lab in zip(logits, labels)]
    return torch.stack(rows)


def measure(seq: int, mb: int, vocab: int, dtype: str) -> dict:
    model, model_type, kw = _resized(vocab, dtype)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    ids = torch.randint(0, vocab, (2 * mb, seq))  # chosen rows then rejected rows
    with LiveBytes(ids, *model.parameters(), *ref.parameters()) as rec:
        out = model(input_ids=ids, use_cache=False)
        logps = token_logps(out.logits[:, :-1], ids[:, 1:]).sum(1)
        policy = rec.live()
        rec.peak = policy
        with torch.no_grad():
            ref_out = ref(input_ids=ids, use_cache=False)
            ref_logps = token_logps(ref_out.logits[:, :-1], ids[:, 1:]).sum(1)
        reference = rec.peak - policy
        del ref_out
        (logps - ref_logps).sum().backward()
    setup = TrainingSetup(precision=PRECISIONS[dtype], seq_len=seq, micro_batch=mb, post_training=PostTraining.dpo)
    arch = base.architecture(model_type, kw)
    forwarded = forwarded_setup(setup)
    e = setup.precision.compute_bytes
    predicted = reference_forward_bytes(activation_bytes(arch, forwarded), forwarded.micro_batch, e,
                                        forwarded.micro_batch * seq * arch.hidden_size * e)
    copy_bytes = sum(p.numel() * p.element_size() for p in ref.parameters())
    numel = sum(p.numel() for p in model.parameters())
    predicted_copy = reference_parameter_bytes(numel, setup, Engine.deepspeed, ZeroStage.zero0, 1, peft=False)
    in_op = activation_bytes(arch, forwarded).logits_bytes if dtype == "fp32" else 0
    return dict(in_op=in_op, dtype=dtype, seq=seq, mb=mb, vocab=vocab, policy=policy, reference=reference, zeroplan=predicted,
                copy=copy_bytes, zeroplan_copy=predicted_copy)


def _resized(vocab: int, dtype: str):
    """The harness's tiny Llama (validation/measure_activations.py) with `vocab` tokens."""
    family = f"llama-v{vocab}"
    base.FAMILIES[family] = ("llama", base.FAMILIES["llama"][1] | {"vocab_size": vocab})
    return base.build_model(family, dtype, "sdpa", Checkpointing.none)


def error(r: dict) -> float:
    return (r["zeroplan"] - r["in_op"] - r["reference"]) / r["reference"]


def markdown(rows) -> str:
    lines = ["| dtype | seq | micro-batch (pairs) | vocab | policy alive (B) | reference forward measured (B) | zeroplan (B) "
             "| of it in-op (B) | error | copy measured (B) | zeroplan copy (B) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['seq']} | {r['mb']} | {r['vocab']} | {r['policy']:,} | {r['reference']:,} | "
                     f"{r['zeroplan']:,} | {r['in_op']:,} | {error(r):+.1%} | {r['copy']:,} | {r['zeroplan_copy']:,} |")
    return "\n".join(lines)


def write_docs(table: str) -> None:
    text = DOCS.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOCS.write_text(text[:start] + "\n" + table + "\n" + text[stop:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = [measure(*case) for case in CASES]
    table = markdown(rows)
    print(table)
    if args.write_docs:
        write_docs(table)
    bad = [r for r in rows if not 0 <= error(r) <= TOLERANCE or r["copy"] != r["zeroplan_copy"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
