"""--training-loop (memory.activations.loop): what litgpt's loop keeps from one micro-step into the next, where the
step's timeline holds it, litgpt's own loss on Fabric's fp32 logits, and the refusals."""

import json
import sys
from pathlib import Path

import pytest

from zeroplan import api
from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.loop import LITGPT_HEAD_CHUNK, litgpt_loss
from zeroplan.memory.activations.ops import FP32_BYTES, INDEX_BYTES
from zeroplan.memory.timeline import END_OF_FORWARD, LOSS_BACKWARD, START, STEP

MEASURED = Path(__file__).resolve().parents[1] / "validation" / "training_loop_measured.json"
LORA = dict(model="llama-3.1-8b", gpus=1, hardware=None, engine="none", stage=0, precision="bf16-true", seq_len=512,
            micro_batch=4, lora_rank=16, lora_dropout=0.05, adapter_dtype="base",
            lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head")
QLORA = {**LORA, "adapter_dtype": "fp32", "qlora": True, "qlora_stack": "litgpt", "bnb_version": "0.42.0",
         "hardware": "a100-sxm-80gb"}
V = 128_256  # llama-3.1-8b's vocabulary


def _acts(**kw):
    est = api.estimate(**kw)
    return est, est.activations, est.stages[0].timeline


@pytest.mark.parametrize("row", json.loads(MEASURED.read_text())["rows"], ids=lambda r: f"h{r['hidden']}-4bit{r['four_bit']}")
def test_carried_bytes_equal_what_the_loop_keeps_measured_with_lightning_fabric(row):
    """validation/measure_training_loop.py: Fabric(precision="bf16-true") and litgpt's loop lines on CPU; the second
    micro-step's forward holds the first's fp32 logits and, for bitsandbytes 0.42.0's MatMul4Bit, every input it
    kept on its ctx. zeroplan's carried bytes for the same model are the measured ones, to the byte."""
    sys.path.insert(0, str(MEASURED.parent))
    from training_loop_model import zeroplan_carried

    assert row["logits_dtype"] == "torch.float32"  # Fabric's convert_output
    assert zeroplan_carried(row) == row["carried"] == row["zeroplan"]


def test_trainer_loop_carries_nothing_and_litgpt_carries_the_previous_fp32_logits():
    _, trainer, _ = _acts(**LORA)
    _, litgpt, _ = _acts(**LORA, training_loop="litgpt")
    t = LORA["micro_batch"] * LORA["seq_len"]
    assert (trainer.carried_bytes, trainer.handoff_bytes, trainer.loop_held_bytes) == (0, 0, 0)
    assert litgpt.carried_bytes == FP32_BYTES * t * V  # a 16-bit base keeps no input on a ctx
    assert litgpt.handoff_bytes == 2 * t * V  # the bf16 logits the head makes, alive while Fabric casts them
    assert litgpt.logits_bytes == litgpt.loop_held_bytes == FP32_BYTES * t * V


def test_an_old_bitsandbytes_adds_every_4bit_input_it_keeps_and_a_new_one_none():
    _, old, _ = _acts(**QLORA, training_loop="litgpt")
    _, new, _ = _acts(**{**QLORA, "bnb_version": "0.45.0"}, training_loop="litgpt")
    t = QLORA["micro_batch"] * QLORA["seq_len"]
    assert new.carried_bytes == FP32_BYTES * t * V
    # Llama 3.1 8B: the first layer's q/k/v input needs no gradient (a frozen embedding and norm); after it every
    # layer's four linear inputs (h, q width h, h, intermediate 14336) and the head's input h, in bf16
    h, inter, layers = 4096, 14336, 32
    inputs = (h + h + inter) + (layers - 1) * (3 * h + inter) + h
    assert old.carried_bytes - new.carried_bytes == 2 * t * inputs


def test_the_timeline_holds_the_carried_bytes_until_the_forward_returns():
    _, trainer, tl_trainer = _acts(**QLORA, training_loop="trainer")
    _, litgpt, tl = _acts(**QLORA, training_loop="litgpt")
    by_name = {ev.name: ev for ev in tl.events}
    start = by_name[START].by_category()["activations"]
    assert start == litgpt.carried_bytes  # the previous micro-step's, before this forward runs
    end = by_name[END_OF_FORWARD].by_category()["activations"]
    # the end of the forward: every layer, the head's fp32 logits and the larger of the loss and the hand-off
    # (carried + the bf16 logits while they are cast, or + the head's dequantized weight)
    # the end of the forward: every layer, the head's fp32 logits, and the largest of three moments: the head's matmul
    # (its dequantized weight beside the bf16 logits, before the fp32 copy exists), Fabric's cast (the bf16 logits
    # beside the fp32 copy) and the loss; the carried bytes die when the forward returns, before the loss
    fp32_minus_bf16 = litgpt.loop_held_bytes - litgpt.handoff_bytes
    ends = max(litgpt.loss_bytes, litgpt.head_dequant_bytes,
               litgpt.carried_bytes + litgpt.head_dequant_bytes - fp32_minus_bf16,
               litgpt.carried_bytes + litgpt.handoff_bytes)
    assert end - ends == litgpt.layers_bytes + litgpt.embedding_bytes + litgpt.final_norm_bytes + litgpt.logits_bytes
    # after the loss's backward the loop still holds this micro-step's fp32 logits, through the optimizer step
    step_trainer = {ev.name: ev for ev in tl_trainer.events}[STEP].by_category()["activations"]
    assert by_name[STEP].by_category()["activations"] - step_trainer == litgpt.loop_held_bytes
    assert tl.peak.total > tl_trainer.peak.total and tl.peak.name == END_OF_FORWARD
    assert by_name[LOSS_BACKWARD].by_category()["activations"] < end


def test_litgpt_loss_is_cross_entropy_on_fp32_logits_and_copies_only_what_it_slices():
    class Arch:
        vocab_size, final_logit_softcapping = 1000, None

    b, s = 4, 300
    full = litgpt_loss(Arch, b, s, 2, chunked_head=False)
    assert full.logits == FP32_BYTES * b * s * 1000
    assert full.saved == FP32_BYTES * b * s * 1000 + INDEX_BYTES * b * s
    assert full.transient == FP32_BYTES * b * (s - 1) * 1000  # full.py: logits[..., :-1, :] reshaped, a copy
    last = s - LITGPT_HEAD_CHUNK * 2  # 300 = 128 + 128 + 44
    assert litgpt_loss(Arch, b, s, 2, chunked_head=True).transient == FP32_BYTES * b * (last - 1) * 1000
    assert litgpt_loss(Arch, 1, s, 2, chunked_head=False).transient == 0  # one row: the slice is contiguous, a view


@pytest.mark.parametrize(("extra", "needle"), [
    ({"loss": "chunked"}, "--training-loop litgpt: litgpt runs its own chunked_cross_entropy"),
    ({"loss": "liger"}, "not --loss liger"),
])
def test_a_loss_litgpt_does_not_run_is_refused_in_one_line(extra, needle):
    with pytest.raises(ZeroplanError, match=needle):
        api.estimate(**LORA, training_loop="litgpt", **extra)


def test_a_mesh_is_refused_and_the_assumption_names_the_loop():
    with pytest.raises(ZeroplanError, match="--training-loop litgpt: modelled on data parallelism only"):
        api.estimate(model="llama-3.1-8b", gpus=8, tp=2, training_loop="litgpt")
    with pytest.raises(ZeroplanError, match="--training-loop litgpt: modelled on data parallelism only"):
        api.estimate(model="llama-3.1-8b", gpus=8, tp=2, lora_rank=8, qlora=True, qlora_stack="litgpt")  # its default
    est = api.estimate(**LORA, training_loop="litgpt")
    assert any(a.startswith("training loop litgpt (Lightning Fabric)") for a in est.assumptions)
    assert not any("training loop" in a for a in api.estimate(**LORA).assumptions)


def test_lightnings_quantizer_dequantizes_to_fp16_then_casts_two_copies_alive():
    """litgpt's QLoRA: Lightning quantizes weight.to(torch.half), so bitsandbytes 0.42.0 dequantizes to fp16 and
    MatMul4Bit casts to bf16: the fp16 copy beside the bf16 one; peft's quantizer keeps the bf16 state: one copy."""
    _, lit, _ = _acts(**QLORA, training_loop="trainer")
    _, trl, _ = _acts(**{**QLORA, "qlora_stack": "trl"})
    h, inter = 4096, 14336
    assert lit.dequant_bytes == (2 + 2) * inter * h and trl.dequant_bytes == 2 * inter * h
    assert lit.head_dequant_bytes == (2 + 2) * V * h and trl.head_dequant_bytes == 0  # peft leaves the head alone


def test_litgpts_qlora_stack_runs_litgpts_loop_unless_told_otherwise():
    """--qlora-stack litgpt is litgpt's finetune scripts, so their loop is the default; --training-loop overrides."""
    _, stack, _ = _acts(**QLORA)
    _, told, _ = _acts(**QLORA, training_loop="litgpt")
    _, trainer, _ = _acts(**QLORA, training_loop="trainer")
    assert stack == told and stack.carried_bytes > 0 and trainer.carried_bytes == 0
    _, peft, _ = _acts(**{**QLORA, "qlora_stack": "peft"})
    assert peft.carried_bytes == 0


def test_litgpts_loss_backward_keeps_the_logits_the_loop_holds_and_two_chunk_gradients():
    """The loop holds the fp32 logits through the backward; chunked_cross_entropy's first chunk backward holds every
    chunk's saved log-softmax and that chunk's two gradients (b x 128 rows for lora.py's chunked head)."""
    est, acts, tl = _acts(**LORA, training_loop="litgpt")
    b, s = LORA["micro_batch"], LORA["seq_len"]
    chunk = FP32_BYTES * b * LITGPT_HEAD_CHUNK * V
    assert acts.loss_backward_bytes == acts.logits_bytes + FP32_BYTES * b * s * V + INDEX_BYTES * b * s + 2 * chunk
    by_name = {ev.name: ev.by_category()["activations"] for ev in tl.events}
    own = acts.loss_backward_bytes - acts.logits_bytes
    assert by_name[LOSS_BACKWARD] == (acts.layers_bytes + acts.embedding_bytes + acts.final_norm_bytes
                                      + acts.logits_bytes + max(own, acts.head_dequant_bytes))
