"""Measure ASFT's and knowledge distillation's steps, and compare with zeroplan's terms (memory.posttrain).

Needs a CPU build of PyTorch and transformers (neither LLaMA-Factory nor TRL is needed: their steps are reproduced
with torch). Counted as validation/measure_reference.py counts (every storage an op returns tracked by a weak
reference, the live bytes summed after each op; parameters and inputs excluded).
- ASFT, as hiyouga/LLaMA-Factory@ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30 runs it (src/llamafactory/train/sft/
  trainer.py `compute_loss`, train/trainer_utils.py `asft_loss_func`, `_dft_cross_entropy`, `_kl_divergence`):
  the reference's no-grad forward first, then the policy forward with the labels (transformers' ForCausalLMLoss,
  reproduced by the model's own `loss_function`), then the ASFT loss on the logits and the reference's logits.
    start    the reference forward's peak (nothing of the step alive before it); zeroplan: inference_forward_bytes
    held     what it leaves alive (its logits); zeroplan: the logits' bytes
    loss     the peak from the policy forward's end (policy, logits, reference logits alive) to the loss's end, less
             what was alive then; zeroplan: the larger of transformers' loss term and asft_loss_bytes
- KD, as huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8 runs GKD off-policy (trl/experimental/gkd/
  gkd_trainer.py `compute_loss`, `generalized_jsd_loss` with its defaults beta 0.5 and temperature 0.9): the student
  forward without labels, the teacher's no-grad forward (a larger tiny Llama of the same vocabulary), the JSD.
    loss     the peak from the student forward's end to the loss's end, less what was alive then; zeroplan: the
             larger of the teacher's inference_forward_bytes and its logits + jsd_loss_bytes
Gate: never below the measurement; above it by at most TOLERANCE (the layer bound, the shifted logits counted whole).

    python validation/measure_posttrain.py              # table on stdout
    python validation/measure_posttrain.py --write-docs # regenerate the table in docs/finetune.md
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from validation import measure_activations as base
from validation.measure_reference import PRECISIONS, LiveBytes, resized
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.posttrain import inference_forward_bytes, posttrain_profile
from zeroplan.memory.setup import PostTraining, TrainingSetup
from zeroplan.memory.timeline import profile_from

DOCS = Path(__file__).resolve().parents[1] / "docs" / "finetune.md"
BEGIN, END = "<!-- BEGIN measured (validation/measure_posttrain.py --write-docs) -->", "<!-- END measured posttrain -->"
TOLERANCE = 0.20
SCALARS = 0.001  # the loss's scalars and masks (a few bytes) zeroplan does not count
CASES = ([("asft", seq, mb, vocab, dtype) for dtype in ("bf16", "fp32") for seq in (32, 64) for mb in (1, 2)
          for vocab in (1000, 8000)]
         + [("kd", seq, mb, vocab, "bf16") for seq in (32, 64) for mb in (1, 2) for vocab in (1000, 8000)])
TEACHER = dict(hidden_size=96, intermediate_size=256, num_hidden_layers=3)  # a larger tiny Llama, the same vocabulary


def asft_loss(logits, labels, ref_logits, alpha=0.1):
    """asft_loss_func as LLaMA-Factory writes it: dft cross-entropy plus alpha x KL(ref || policy), fp32."""
    logits = logits.float()
    shift = logits[..., :-1, :].contiguous().view(-1, logits.shape[-1])
    shift_ref = ref_logits[..., :-1, :].contiguous().view(-1, logits.shape[-1])
    target = labels[..., 1:].contiguous().view(-1)
    per_token = F.cross_entropy(shift, target, ignore_index=-100, reduction="none")
    dft = (per_token * torch.exp(-per_token).detach()).mean()
    kl = F.kl_div(F.log_softmax(shift, dim=-1), F.softmax(shift_ref, dim=-1), reduction="none").sum(dim=-1)
    mask = (target != -100).float()
    return dft + alpha * (kl * mask).sum() / mask.sum()


def jsd_loss(student, teacher, labels, beta=0.5, temperature=0.9):
    """GKDTrainer.generalized_jsd_loss for 0 < beta < 1, reduction batchmean."""
    student, teacher = student / temperature, teacher / temperature
    s_lp, t_lp = F.log_softmax(student, dim=-1), F.log_softmax(teacher, dim=-1)
    beta = torch.tensor(beta, dtype=s_lp.dtype)
    mixture = torch.logsumexp(torch.stack([s_lp + torch.log1p(-beta), t_lp + torch.log(beta)]), dim=0)
    kl_teacher = F.kl_div(mixture, t_lp, reduction="none", log_target=True)
    kl_student = F.kl_div(mixture, s_lp, reduction="none", log_target=True)
    jsd = beta * kl_teacher + (1 - beta) * kl_student
    mask = labels != -100
    return jsd[mask].sum() / mask.sum().clamp_min(1)


def measure_asft(seq: int, mb: int, vocab: int, dtype: str) -> dict:
    model, model_type, kw = resized(vocab, dtype)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    ids = torch.randint(0, vocab, (mb, seq))
    with LiveBytes(ids, *model.parameters(), *ref.parameters()) as rec:
        with torch.no_grad():
            ref_logits = ref(input_ids=ids, use_cache=False).logits
        start, held = rec.peak, rec.live()
        out = model(input_ids=ids, use_cache=False)
        alive = rec.restart()
        hf = model.loss_function(out.logits, ids, vocab_size=vocab)  # what the forward given labels adds
        loss = asft_loss(out.logits, ids, ref_logits)  # transformers' loss (its graph) still alive, as in outputs
        measured_loss = rec.peak - alive
        del ref_logits, hf  # compute_loss returns: the reference logits and transformers' loss freed
        backward = loss_backward(loss, out.logits, rec, alive - held)
    setup = TrainingSetup(precision=PRECISIONS[dtype], seq_len=seq, micro_batch=mb, post_training=PostTraining.asft)
    arch = base.architecture(model_type, kw)
    plain = activation_bytes(arch, setup)
    prof = posttrain_profile(profile_from(plain, arch, setup), plain, setup, arch.hidden_size)
    return dict(kind="asft", dtype=dtype, seq=seq, mb=mb, vocab=vocab, start=start,
                zeroplan_start=inference_forward_bytes(plain, setup, arch.hidden_size), held=held,
                zeroplan_held=plain.logits_bytes, loss=measured_loss, zeroplan_loss=prof.loss, backward=backward,
                zeroplan_backward=plain.logits_bytes + prof.loss_backward)


def measure_kd(seq: int, mb: int, vocab: int, dtype: str) -> dict:
    model, model_type, kw = resized(vocab, dtype)
    family = f"llama-teacher-v{vocab}"
    base.FAMILIES[family] = ("llama", base.FAMILIES["llama"][1] | {"vocab_size": vocab, **TEACHER})
    teacher, _, teacher_kw = base.build_model(family, dtype, "sdpa", base.Checkpointing.none)
    teacher.eval().requires_grad_(False)
    ids = torch.randint(0, vocab, (mb, seq))
    with LiveBytes(ids, *model.parameters(), *teacher.parameters()) as rec:
        out = model(input_ids=ids, use_cache=False)
        alive = rec.restart()
        with torch.no_grad():
            t_out = teacher(input_ids=ids, use_cache=False)
        loss = jsd_loss(out.logits[:, :-1, :], t_out.logits[:, :-1, :], ids[:, 1:])
        measured_loss = rec.peak - alive
        del t_out  # compute_loss returns: the teacher's logits freed
        backward = loss_backward(loss, out.logits, rec, alive)
    setup = TrainingSetup(precision=PRECISIONS[dtype], seq_len=seq, micro_batch=mb, post_training=PostTraining.kd)
    arch = base.architecture(model_type, kw)
    plain = activation_bytes(arch, setup)
    t_arch = base.architecture("llama", teacher_kw)
    t_plain = activation_bytes(t_arch, setup)
    prof = posttrain_profile(profile_from(plain, arch, setup), plain, setup, arch.hidden_size, t_plain, t_arch.hidden_size)
    return dict(kind="kd", dtype=dtype, seq=seq, mb=mb, vocab=vocab, start=0, zeroplan_start=0, held=0,
                zeroplan_held=0, loss=measured_loss, zeroplan_loss=prof.loss, backward=backward,
                zeroplan_backward=plain.logits_bytes + prof.loss_backward)


def loss_backward(loss, logits, rec: LiveBytes, policy: int) -> int:
    """The loss's backward down to the logits' gradient (torch.autograd.grad: the loss's part of the graph only), its
    peak over the policy's saved tensors and logits (the logits a real step has freed by then: zeroplan counts them as
    the head's at that event, its loss term less them)."""
    rec.restart()
    torch.autograd.grad(loss, logits)  # saved tensors freed as it goes, as a training step's backward frees them
    return rec.peak - policy


def measure(kind: str, seq: int, mb: int, vocab: int, dtype: str) -> dict:
    return (measure_asft if kind == "asft" else measure_kd)(seq, mb, vocab, dtype)


def error(measured: int, predicted: int) -> float:
    return (predicted - measured) / measured if measured else float(predicted != 0)


def bad(r: dict) -> bool:
    """The loss phase outside the gate, the reference's logits not exact, ASFT's first forward or the loss's backward
    below zeroplan's (the backward's is a bound: the loss's forward term)."""
    return (not -SCALARS <= error(r["loss"], r["zeroplan_loss"]) <= TOLERANCE or r["held"] != r["zeroplan_held"]
            or error(r["start"], r["zeroplan_start"]) < -SCALARS or r["backward"] > r["zeroplan_backward"])


def markdown(rows) -> str:
    lines = ["| step | dtype | seq | micro-batch | vocab | first forward measured (B) | zeroplan (B) | its logits kept "
             "measured (B) | zeroplan (B) | loss phase measured (B) | zeroplan (B) | error | loss backward measured (B) "
             "| zeroplan bound (B) |", "|---" * 14 + "|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['dtype']} | {r['seq']} | {r['mb']} | {r['vocab']} | {r['start']:,} | "
                     f"{r['zeroplan_start']:,} | {r['held']:,} | {r['zeroplan_held']:,} | {r['loss']:,} | "
                     f"{r['zeroplan_loss']:,} | {error(r['loss'], r['zeroplan_loss']):+.1%} | {r['backward']:,} | "
                     f"{r['zeroplan_backward']:,} |")
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
    return 1 if any(bad(r) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
