"""A fine-tune's step timeline reads the fine-tune's activations, layer by layer (issue 23, item 1).

Invariant, over fine-tuning modes, families, checkpointing and engines: the activations alive at the end of the
forward equal the printed breakdown's total less what lives only inside a backward (the recompute), and the
layer events rise by exactly each layer's own bytes as the breakdown lists them. A 4-bit base's dequantized
weight is alive inside the layer events only (docs/finetune.md, "QLoRA on a GPU")."""

import pytest

import zeroplan

QV = "q_proj,v_proj"  # named: peft has no default targets for gemma3, qwen3_moe or gpt_oss (memory/peft_targets.py)
MODES = {
    "lora q,v": {"lora_rank": 16, "lora_targets": QV},
    "lora all-linear p0.05": {"lora_rank": 16, "lora_targets": "all-linear", "lora_dropout": 0.05},
    "dora": {"lora_rank": 8, "lora_targets": QV, "dora": True},
    "qlora all-linear": {"lora_rank": 16, "lora_targets": "all-linear", "qlora": True},
    "frozen prefix": {"freeze": "model.embed_tokens.*,model.layers.0.*,model.layers.1.*"},
    "modules_to_save": {"lora_rank": 8, "lora_targets": QV, "modules_to_save": "embed_tokens"},
}
MODELS = ("llama-3.1-8b", "qwen3-8b", "gemma3-27b", "qwen3-30b-a3b", "gpt-oss-20b")


def _events(model, mode, checkpointing, engine):
    est = zeroplan.estimate(model=model, gpus=1, hardware=None, stage=0, engine=engine, seq_len=1024,
                            checkpointing=checkpointing, **MODES[mode])
    return est, est.stages[0].timeline.events


@pytest.mark.parametrize("engine", ["deepspeed", "none"])
@pytest.mark.parametrize("checkpointing", ["none", "full"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", MODELS)
def test_end_of_forward_holds_the_breakdowns_activations(model, mode, checkpointing, engine):
    if mode == "lora all-linear p0.05" and model == "qwen3-30b-a3b":
        pytest.skip("peft refuses lora_dropout on the wrapped experts (zeroplan too)")
    est, events = _events(model, mode, checkpointing, engine)
    acts = est.activations
    end = next(e for e in events if e.name == "end of forward").by_category()["activations"]
    assert end == acts.total_bytes - acts.recompute_bytes
    stage = est.stages[0]
    if stage.peak_moment == "end of forward":  # the peak's activations are the breakdown's
        assert stage.timeline.peak.by_category()["activations"] == acts.total_bytes - acts.recompute_bytes
    assert max(e.by_category()["activations"] for e in events) <= (
        acts.total_bytes + acts.recompute_bytes + acts.dequant_bytes + acts.loss_transient_bytes + _loss_over_end(acts))
    if checkpointing == "none":  # each layer's forward adds that layer's own bytes, as the breakdown lists them
        forward = [e.by_category()["activations"] for e in events if e.name.startswith("forward of layer")]
        rises = [b - a for a, b in zip(forward, forward[1:])]
        assert rises == list(acts.layer_bytes[1:])
        assert sum(acts.layer_bytes) + acts.held_bytes == acts.layers_bytes


def _loss_over_end(acts) -> int:
    """What the loss's backward holds beyond the forward's end: its T x V tensors in place of the logits, the saved
    log-softmax and the fp32 copy (formulas.md, Peak); 0 where the forward's end holds more."""
    return max(0, acts.loss_backward_bytes - acts.logits_bytes - acts.loss_bytes)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-32b"])
def test_the_peak_of_a_lora_run_is_the_fine_tunes_not_full_trainings(model):
    """The issue's cases: the peak's activations are the breakdown's (the loss's backward in place of the loss),
    well under full training's."""
    est = zeroplan.estimate(model=model, gpus=8, stage=2, seq_len=4096, lora_rank=16, qlora=model == "qwen3-32b")
    full = zeroplan.estimate(model=model, gpus=8, stage=2, seq_len=4096)
    peak = est.stages[0].timeline.peak.by_category()["activations"]
    acts = est.activations
    assert est.stages[0].peak_moment == "backward of the loss"
    assert _loss_over_end(acts) == acts.logits_bytes  # 12 T V - (2 + 4 + 4) T V in bf16 with the fp32 upcast
    assert peak == acts.total_bytes + _loss_over_end(acts) < full.activations.total_bytes


def test_the_dequantized_weight_is_alive_inside_the_layers_only():
    est, events = _events("llama-3.1-8b", "qlora all-linear", "none", "none")
    plain, _ = _events("llama-3.1-8b", "lora all-linear p0.05", "none", "none")
    dq = est.activations.dequant_bytes
    assert dq == 2 * 14336 * 4096  # bf16 x the largest quantized weight, gate/up/down_proj (14336 x 4096)
    assert dq not in (0, est.activations.total_bytes)
    by_name = {e.name: e.by_category()["activations"] for e in events}
    layer0 = est.activations.embedding_bytes + est.activations.layer_bytes[0]
    assert by_name["forward of layer 0"] == layer0 + dq and by_name["backward of layer 0"] == layer0 + dq
    assert by_name["end of forward"] == est.activations.total_bytes  # no linear is running there
    assert plain.activations.dequant_bytes == 0


def test_a_quantized_heads_dequantized_weight_is_alive_with_the_head_only():
    """litgpt quantizes the head too: its e V h copy is alive while the head's matmul runs (before the loss's own
    transient, so the end of the forward holds the larger of the two) and in the loss's backward."""
    kw = dict(model="llama-3.1-8b", gpus=1, hardware=None, stage=0, engine="none", precision="bf16-true",
              seq_len=512, lora_rank=8, qlora=True, qlora_stack="litgpt", adapter_dtype="base",
              training_loop="trainer")  # the head alone: no previous micro-step carried (tests/test_training_loop.py)
    est = zeroplan.estimate(loss="no-upcast", **kw)
    acts = est.activations
    # bf16 and the fp16 copy Lightning's fp16 quant state dequantizes to before the cast (tuning.LIGHTNING_STATE_BYTES)
    assert acts.head_dequant_bytes == (2 + 2) * 128256 * 4096 and acts.dequant_bytes == (2 + 2) * 14336 * 4096
    by_name = {e.name: e.by_category()["activations"] for e in est.stages[0].timeline.events}
    head = acts.final_norm_bytes + acts.logits_bytes + acts.logit_softcap_bytes
    before = acts.total_bytes - head - acts.loss_bytes  # layers and embedding
    assert by_name["end of forward"] == before + head + max(acts.loss_bytes, acts.head_dequant_bytes)
    assert by_name["backward of the loss"] == before + head + acts.head_dequant_bytes
    peft = zeroplan.estimate(**{**kw, "qlora_stack": "peft", "adapter_dtype": "fp32"})
    assert peft.activations.head_dequant_bytes == 0
