"""Measure the reference forward of TRL's DPO and KTO steps, and compare with zeroplan's terms (memory.reference).

Needs a CPU build of PyTorch and transformers (TRL is not needed: its step order is reproduced with torch). The steps,
as huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8 runs them:
- DPO (trl/trainer/dpo_trainer.py `_compute_loss`): the policy forward on the chosen and rejected rows concatenated
  (2 x micro-batch sequences), the per-token log-probs of its logits (trl/trainer/utils.py `selective_log_softmax`:
  one row at a time), then under torch.no_grad() the reference forward on the same rows and its log-probs; then the
  logged metrics with the reference's outputs still alive: `entropy_from_logits(shift_logits.detach())` (a reshape of
  the shifted logits, a copy for more than one row, then 128-row chunks), the chosen rows' masked logits.
- KTO (trl/trainer/kto_trainer.py `_compute_loss`): unpaired rows (1 x micro-batch) and the KL batch (the same rows'
  prompts with mismatched completions, kto_trainer.py `add_kl_completion_ids`): first the KL batch through the policy
  under no_grad (`_compute_kl_logps`), then the policy forward, then under no_grad the KL batch and the batch through
  the reference; then the metrics: the entropy as DPO's, the chosen and rejected rows' logits by index_select (copies)
  and their masked logits. Every row is desirable here and every token a completion token: the most KTO's metrics keep.
The reference is a frozen deep copy of the policy (no peft) or the policy itself (peft's adapter-disabled base: the
same forward, so measured once).

Measured quantity (CPU stand-in for the CUDA allocator): every storage an aten op returns is tracked by a weak
reference (torch.multiprocessing.reductions.StorageWeakRef) from the start of the step; after each op the bytes of
the storages still alive are summed. Parameters and inputs, made before the step, are not counted.
  policy     live bytes when the reference forward starts (the policy's saved activations, logits, log-probs)
  reference  the largest live bytes from the reference forward's start to the end of the metrics, less `policy`
  zeroplan   memory.reference.reference_forward_bytes on the forwarded batch without checkpointing
  in-op      of zeroplan's, what no dispatch-level count sees: fp32 logits' log-probs go through torch.logsumexp one row
             at a time, whose kernel makes exp(x - max) the row's size inside the op (pytorch aten/src/ATen/native/
             ReduceOps.cpp logsumexp_out_impl); modelled from that source, compared as zeroplan less it
  kl start   KTO: the KL batch's no-grad policy forward at the step's start (nothing of the step alive yet)
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
from zeroplan.memory.reference import (
    forwarded_setup,
    reference_forward_bytes,
    reference_parameter_bytes,
    reference_phases,
)
from zeroplan.memory.setup import Engine, PostTraining, Precision, TrainingSetup, ZeroStage

DOCS = Path(__file__).resolve().parents[1] / "docs" / "finetune.md"
BEGIN, END = "<!-- BEGIN measured (validation/measure_reference.py --write-docs) -->", "<!-- END measured reference -->"
TOLERANCE = 0.20  # never below the measured transient; above it by at most 20% (the layer and shift bounds)
SCALARS = 0.001  # the per-row sums and indices (a few bytes) zeroplan does not count: below by at most 0.1%
CASES = [(kind, seq, mb, vocab, dtype) for kind in ("dpo", "kto") for dtype in ("bf16", "fp32") for seq in (32, 64)
         for mb in (2, 4) for vocab in (1000, 8000)]
PRECISIONS = {"bf16": Precision.bf16_mixed, "fp32": Precision.fp32}
ENTROPY_CHUNK = 128  # trl/trainer/utils.py entropy_from_logits chunk_size


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
        for t in self.plain(out):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                key = s.data_ptr()
                if key and key not in self.before and (key not in self.refs or self.refs[key][0].expired()):
                    self.refs[key] = (StorageWeakRef(s), s.nbytes())
        self.peak = max(self.peak, self.live())
        return out

    def plain(self, out) -> list:
        """The tensors an op returned whose storages count (a subclass overrides this to unwrap wrapper tensors)."""
        return tree_leaves(out)

    def restart(self) -> int:
        """The bytes alive now, from which the next phase's peak is taken."""
        self.peak = self.live()
        return self.peak


def token_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token log-probs of `labels`, one row at a time (TRL's selective_log_softmax at the commit above)."""
    if logits.dtype in (torch.float32, torch.float64):
        picked = torch.gather(logits, -1, labels.unsqueeze(-1)).squeeze(-1)
        return picked - torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
    rows = [torch.gather(r.log_softmax(-1), -1, lab.unsqueeze(-1)).squeeze(-1) for r, lab in zip(logits, labels)]
    return torch.stack(rows)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """trl/trainer/utils.py entropy_from_logits: the flattened logits in chunks of 128 rows."""
    flat = logits.reshape(-1, logits.shape[-1])
    parts = []
    for chunk in flat.split(ENTROPY_CHUNK, dim=0):
        logps = torch.log_softmax(chunk, dim=-1)
        parts.append(-(torch.exp(logps) * logps).sum(-1))
    return torch.cat(parts).reshape(logits.shape[:-1])


def dpo_step(model, ref, ids, rec: LiveBytes) -> tuple[int, int, int, int]:
    """(policy alive at the reference forward, the reference forward's peak over it, the peak over it to the end of
    the metrics, 0): DPOTrainer._compute_loss."""
    out = model(input_ids=ids, use_cache=False)
    shift = out.logits[:, :-1]
    logps = token_logps(shift, ids[:, 1:]).sum(1)
    policy = rec.restart()
    with torch.no_grad():
        ref_out = ref(input_ids=ids, use_cache=False)
    ref_logps = token_logps(ref_out.logits[:, :-1], ids[:, 1:]).sum(1)
    forward = rec.peak - policy
    loss = -torch.nn.functional.logsigmoid(logps - ref_logps).mean()
    entropy(shift.detach()).sum()
    chosen, _ = shift.detach().chunk(2, dim=0)
    chosen.reshape(-1, chosen.shape[-1]).mean(-1).sum()  # chosen_logits[chosen_mask.bool()]: every token kept
    reference = rec.peak - policy
    del ref_out
    loss.backward()
    return policy, forward, reference, 0


def kto_step(model, ref, ids, rec: LiveBytes) -> tuple[int, int, int, int]:
    """(policy alive at the reference forward, the reference forwards' peak over it, the peak over it to the end of
    the metrics, the KL forward's peak at the start): KTOTrainer._compute_loss, every row desirable."""
    kl_ids = torch.roll(ids, 1, dims=0)  # the mismatched completions: the batch's rows shifted by one
    with torch.no_grad():
        kl_logits = model(input_ids=kl_ids, use_cache=False).logits
    kl_logps = token_logps(kl_logits[:, :-1], kl_ids[:, 1:]).sum(-1)
    del kl_logits
    kl_start = rec.peak
    out = model(input_ids=ids, use_cache=False)
    shift = out.logits[:, :-1]
    logps = token_logps(shift, ids[:, 1:]).sum(-1)
    policy = rec.restart()
    with torch.no_grad():
        ref_kl_logits = ref(input_ids=kl_ids, use_cache=False).logits
        ref_kl = token_logps(ref_kl_logits[:, :-1], kl_ids[:, 1:]).sum(-1)
        del ref_kl_logits
        ref_out = ref(input_ids=ids, use_cache=False)
    ref_logps = token_logps(ref_out.logits[:, :-1], ids[:, 1:]).sum(-1)
    forward = rec.peak - policy
    kl = (kl_logps - ref_kl).mean().detach().clamp(min=0)
    loss = (1 - torch.sigmoid(0.1 * (logps - ref_logps - kl))).mean()
    entropy(shift.detach()).sum()
    index = torch.arange(ids.shape[0])
    chosen, rejected = shift.detach().index_select(0, index), shift.detach().index_select(0, index[:0])
    chosen.reshape(-1, chosen.shape[-1]).clone().mean(-1).sum()  # chosen_logits[chosen_mask.bool()]: a copy
    reference = rec.peak - policy
    del ref_out, chosen, rejected
    loss.backward()
    return policy, forward, reference, kl_start


STEPS = {"dpo": (dpo_step, PostTraining.dpo), "kto": (kto_step, PostTraining.kto)}


def measure(kind: str, seq: int, mb: int, vocab: int, dtype: str) -> dict:
    step, post_training = STEPS[kind]
    model, model_type, kw = resized(vocab, dtype)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    setup = TrainingSetup(precision=PRECISIONS[dtype], seq_len=seq, micro_batch=mb, post_training=post_training)
    forwarded = forwarded_setup(setup)
    ids = torch.randint(0, vocab, (forwarded.micro_batch, seq))  # DPO: chosen rows then rejected rows
    with LiveBytes(ids, *model.parameters(), *ref.parameters()) as rec:
        policy, forward_measured, reference, kl_start = step(model, ref, ids, rec)
    arch = base.architecture(model_type, kw)
    acts = activation_bytes(arch, forwarded)
    predicted = reference_forward_bytes(acts, forwarded, arch.hidden_size)
    copy_bytes = sum(p.numel() * p.element_size() for p in ref.parameters())
    numel = sum(p.numel() for p in model.parameters())
    predicted_copy = reference_parameter_bytes(numel, setup, Engine.deepspeed, ZeroStage.zero0, 1, peft=False)
    forward, _ = reference_phases(acts, forwarded, arch.hidden_size)
    # the logsumexp's row is inside the forward phase's figure, seen by no dispatch count
    in_op = acts.logits_bytes // forwarded.micro_batch if dtype == "fp32" else 0
    return dict(kind=kind, in_op=in_op, dtype=dtype, seq=seq, mb=mb, vocab=vocab, policy=policy, reference=reference,
                zeroplan=predicted, forward=forward_measured, zeroplan_forward=forward, kl_start=kl_start, copy=copy_bytes,
                zeroplan_copy=predicted_copy)


def resized(vocab: int, dtype: str):
    """The harness's tiny Llama (validation/measure_activations.py) with `vocab` tokens."""
    family = f"llama-v{vocab}"
    base.FAMILIES[family] = ("llama", base.FAMILIES["llama"][1] | {"vocab_size": vocab})
    return base.build_model(family, dtype, "sdpa", base.Checkpointing.none)


def error(r: dict) -> float:
    """zeroplan's against the measured, the in-op row taken off where the forward phase is zeroplan's figure."""
    in_op = r["in_op"] if r["zeroplan"] == r["zeroplan_forward"] else 0
    return (r["zeroplan"] - in_op - r["reference"]) / r["reference"]


def forward_error(r: dict) -> float:
    return (r["zeroplan_forward"] - r["in_op"] - r["forward"]) / r["forward"]


def markdown(rows) -> str:
    lines = ["| trainer | dtype | seq | micro-batch (DPO: pairs) | vocab | policy alive (B) | forward measured (B) "
             "| zeroplan forward (B) | in-op (B) | error | with metrics measured (B) | zeroplan (B) | error | KL start (B) "
             "| copy measured (B) | zeroplan copy (B) |", "|---" * 16 + "|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['dtype']} | {r['seq']} | {r['mb']} | {r['vocab']} | {r['policy']:,} | "
                     f"{r['forward']:,} | {r['zeroplan_forward']:,} | {r['in_op']:,} | {forward_error(r):+.1%} | "
                     f"{r['reference']:,} | {r['zeroplan']:,} | {error(r):+.1%} | {r['kl_start']:,} | "
                     f"{r['copy']:,} | {r['zeroplan_copy']:,} |")
    return "\n".join(lines)


def write_docs(table: str) -> None:
    text = DOCS.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOCS.write_text(text[:start] + "\n" + table + "\n" + text[stop:])


def bad(r: dict) -> bool:
    """Outside the gate: the whole below the measurement or too far above it; the forward phase below it (above, it
    is the layer bound: a training layer's saved tensors for an inference layer's working set); the copy's bytes not
    exact; or (KTO) the KL batch's forward at the start larger than what zeroplan counts on top of the policy."""
    return (not -SCALARS <= error(r) <= TOLERANCE or forward_error(r) < -SCALARS or r["copy"] != r["zeroplan_copy"]
            or r["kl_start"] > r["zeroplan"])


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
    return 1 if any(bad(r) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
