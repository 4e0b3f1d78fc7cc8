"""Activation model: closed forms, the paper's frame, orderings and invariants. Torch-free.

What PyTorch really saves is checked by tests/test_activations_torch.py and the full grid in
validation/measure_activations.py (docs/activations.md).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import ActivationEstimate, activation_bytes
from zeroplan.memory.activations.checkpointing import OP_SAC_FAMILIES
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
from zeroplan.models.architecture import Architecture

LLAMA2_7B = Architecture(
    family="llama", hidden_size=4096, num_layers=32, num_attention_heads=32, num_key_value_heads=32, head_dim=128,
    intermediate_size=11008, vocab_size=32000, gated_mlp=True, norm="rmsnorm", tie_word_embeddings=False,
)
LLAMA3_8B = replace(LLAMA2_7B, num_key_value_heads=8, intermediate_size=14336, vocab_size=128256)
GPT2 = Architecture(
    family="gpt2", hidden_size=768, num_layers=12, num_attention_heads=12, num_key_value_heads=12, head_dim=64,
    intermediate_size=3072, vocab_size=50257, gated_mlp=False, norm="layernorm", tie_word_embeddings=True,
    learned_positions=1024, dropout=0.1, attention_dropout=0.1,
)
GEMMA2_9B = Architecture(
    family="gemma2", hidden_size=3584, num_layers=42, num_attention_heads=16, num_key_value_heads=8, head_dim=256,
    intermediate_size=14336, vocab_size=256000, gated_mlp=True, norm="rmsnorm", norms_per_layer=4,
    tie_word_embeddings=True, attn_logit_softcapping=50.0, final_logit_softcapping=30.0, sliding_window=4096,
)
MIXTRAL = replace(LLAMA2_7B, family="mixtral", num_key_value_heads=8, intermediate_size=14336, num_experts=8,
                  num_experts_per_tok=2)
T5_BASE = Architecture(
    family="t5", hidden_size=768, num_layers=12, num_encoder_layers=12, num_attention_heads=12, num_key_value_heads=12,
    head_dim=64, intermediate_size=3072, vocab_size=32128, gated_mlp=False, norm="rmsnorm", norms_per_layer=3,
    tie_word_embeddings=True, dropout=0.1, attention_dropout=0.1,
)
PHI3 = replace(LLAMA2_7B, family="phi3", hidden_size=3072, num_attention_heads=32, head_dim=96, num_key_value_heads=32,
               intermediate_size=8192, vocab_size=32064)
FALCON = Architecture(
    family="falcon", hidden_size=4544, num_layers=32, num_attention_heads=71, num_key_value_heads=1, head_dim=64,
    intermediate_size=18176, vocab_size=65024, gated_mlp=False, norm="layernorm", norms_per_layer=1,
    parallel_attn=True, tie_word_embeddings=True,
)
ARCHS = {a.family: a for a in (LLAMA2_7B, GPT2, GEMMA2_9B, MIXTRAL, T5_BASE, PHI3, FALCON)}
LINES = ("layers_bytes", "recompute_bytes", "embedding_bytes", "final_norm_bytes", "logits_bytes",
         "logit_softcap_bytes", "loss_bytes")


def setup(**kw) -> TrainingSetup:
    return TrainingSetup(**kw)


def test_defaults_are_the_issue_s():
    s = TrainingSetup()
    assert (s.seq_len, s.micro_batch, s.checkpointing, s.attention) == (2048, 1, Checkpointing.none, Attention.flash)
    assert activation_bytes(LLAMA2_7B, s) == activation_bytes(LLAMA2_7B, setup(seq_len=2048, micro_batch=1))


@pytest.mark.parametrize("b, s", [(1, 2048), (4, 4096)])
def test_llama_flash_bf16_closed_form(b, s):
    """Llama-2-7B, bf16, flash, no recompute, term by term (docs/activations.md, Llama row)."""
    h, a, d, f, V, L, T = 4096, 32, 128, 11008, 32000, 32, b * s
    norm = 4 * T * h + 4 * T + 2 * T * h  # fp32 input copy, rsqrt, normed bf16
    attention = norm + 2 * T * h + 2 * T * 3 * a * d + 2 * T * a * d + 4 * b * a * s  # in, q/k/v, out, lse
    mlp = norm + 2 * T * h + 4 * 2 * T * f  # in; gate, act(gate), up, act*up
    est = activation_bytes(LLAMA2_7B, setup(seq_len=s, micro_batch=b))
    assert est.per_layer_bytes == attention + mlp
    assert est.layers_bytes == L * (attention + mlp)
    assert est.embedding_bytes == 8 * T + 2 * 2 * s * d  # int64 ids; rotary cos and sin (1 x s x d)
    assert est.final_norm_bytes == norm + 2 * T * h
    assert est.logits_bytes == 2 * T * V
    assert est.loss_bytes == 4 * T * V + 4 * T * V + 8 * T  # log-softmax, fp32 copy, labels


def test_gpt2_eager_is_korthikanti_plus_python_gelu():
    """Korthikanti et al. 2022 eq. 1: s b h (34 + 5 a s / h) in 16-bit. HF GPT-2 adds 3 tensors of 4h
    (NewGELUActivation keeps input, tanh, 0.5 x, 1 + tanh: 24 s b h) and 2 fp32 LayerNorm stats per norm."""
    b, s, h, a = 2, 1024, 768, 12
    est = activation_bytes(GPT2, setup(seq_len=s, micro_batch=b, attention=Attention.eager))
    assert est.per_layer_bytes == (34 + 24) * s * b * h + 5 * a * s * s * b + 2 * 2 * 4 * s * b


def test_full_checkpointing_keeps_layer_inputs_and_recomputes_one_layer():
    none = activation_bytes(LLAMA2_7B, setup())
    full = activation_bytes(LLAMA2_7B, setup(checkpointing=Checkpointing.full))
    T, h, V = 2048, 4096, 32000
    assert full.per_layer_bytes == 2 * T * h
    assert full.layers_bytes == 32 * 2 * T * h + 8 * 2048  # + int64 position ids the recompute re-reads
    # the recomputed layer fits where the 4 T V fp32 loss copy was (freed first): only the excess counts
    assert full.recompute_bytes == max(0, none.per_layer_bytes - 4 * T * V)


@pytest.mark.parametrize("arch", ARCHS.values(), ids=ARCHS)
@pytest.mark.parametrize("ckpt", list(Checkpointing))
@pytest.mark.parametrize("attention", list(Attention))
@pytest.mark.parametrize("precision", [Precision.bf16_mixed, Precision.fp32])
def test_lines_sum_to_total(arch, ckpt, attention, precision):
    if ckpt is Checkpointing.selective_op and arch.family not in OP_SAC_FAMILIES:
        with pytest.raises(ZeroplanError, match="selective-op"):
            activation_bytes(arch, setup(checkpointing=ckpt, attention=attention, precision=precision))
        return
    est = activation_bytes(arch, setup(seq_len=512, micro_batch=2, checkpointing=ckpt, attention=attention,
                                       precision=precision))
    assert est.total_bytes == sum(getattr(est, line) for line in LINES)
    assert all(getattr(est, line) >= 0 for line in LINES)
    if ckpt is Checkpointing.none and not arch.num_encoder_layers:
        assert est.per_layer_bytes == sum(t.bytes for t in est.layer_terms)


@pytest.mark.parametrize("arch", ARCHS.values(), ids=ARCHS)
@pytest.mark.parametrize("attention", list(Attention))
def test_full_below_selective_at_most_none(arch, attention):
    totals = [activation_bytes(arch, setup(seq_len=4096, checkpointing=c, attention=attention)).total_bytes
              for c in (Checkpointing.full, Checkpointing.selective, Checkpointing.none)]
    assert totals[0] < totals[1] <= totals[2]


@pytest.mark.parametrize("arch", [a for a in ARCHS.values() if a.family != "t5"], ids=lambda a: a.family)
def test_flash_below_eager(arch):
    flash, eager = (activation_bytes(arch, setup(seq_len=2048, attention=x)).total_bytes
                    for x in (Attention.flash, Attention.eager))
    assert flash < eager


def test_selective_with_flash_recomputes_nothing():
    sel, none = (activation_bytes(LLAMA2_7B, setup(checkpointing=c)) for c in (Checkpointing.selective, Checkpointing.none))
    assert sel.total_bytes == none.total_bytes and sel.recompute_bytes == 0
    assert any("nothing is recomputed" in a for a in sel.assumptions)


def test_selective_with_eager_drops_the_score_matrices():
    s, a = 4096, 32
    sel, none = (activation_bytes(LLAMA2_7B, setup(seq_len=s, checkpointing=c, attention=Attention.eager))
                 for c in (Checkpointing.selective, Checkpointing.none))
    assert none.per_layer_bytes - sel.per_layer_bytes == (4 + 2) * a * s * s  # fp32 softmax, bf16 probabilities
    assert sel.recompute_bytes == max(0, (4 + 2) * a * s * s - 4 * s * 32000)  # one core, after the loss copy


def test_eager_keeps_score_matrices_flash_does_not():
    s, a = 4096, 32
    flash, eager = (activation_bytes(LLAMA2_7B, setup(seq_len=s, attention=x)).per_layer_bytes
                    for x in (Attention.flash, Attention.eager))
    assert eager - flash == (4 + 2) * a * s * s - 4 * a * s  # fp32 softmax + bf16 probabilities; log-sum-exp


def test_gqa_keeps_smaller_k_v_than_mha():
    mha = replace(LLAMA3_8B, num_key_value_heads=32)
    for ckpt in (Checkpointing.none, Checkpointing.selective):
        gqa_bytes, mha_bytes = (activation_bytes(x, setup(checkpointing=ckpt)).per_layer_bytes for x in (LLAMA3_8B, mha))
        assert mha_bytes - gqa_bytes == 2 * 2 * 2048 * (32 - 8) * 128  # k and v, bf16, (a - g) d each


def test_gqa_saves_nothing_in_hf_eager_attention():
    """HF's eager attention repeats k and v to all heads (repeat_kv) before the matmuls that keep them."""
    mha = replace(LLAMA3_8B, num_key_value_heads=32)
    eager = setup(attention=Attention.eager)
    assert activation_bytes(LLAMA3_8B, eager).per_layer_bytes == activation_bytes(mha, eager).per_layer_bytes


@settings(max_examples=60, deadline=None)
@given(
    family=st.sampled_from(sorted(ARCHS)),
    b=st.integers(1, 8), s=st.integers(1, 8192),
    ckpt=st.sampled_from([c for c in Checkpointing if c is not Checkpointing.selective_op]),
    attention=st.sampled_from(list(Attention)),
    precision=st.sampled_from(list(Precision)),
)
def test_monotone_in_micro_batch_and_seq_len(family, b, s, ckpt, attention, precision):
    def total(bb: int, ss: int) -> int:
        return activation_bytes(ARCHS[family], setup(seq_len=ss, micro_batch=bb, checkpointing=ckpt,
                                                     attention=attention, precision=precision)).total_bytes
    assert total(b, s) < total(b + 1, s)
    assert total(b, s) < total(b, s + 1)


def test_loss_copy_only_for_16_bit_logits():
    T, V = 2048, 32000
    bf16 = activation_bytes(LLAMA2_7B, setup())
    fp32 = activation_bytes(LLAMA2_7B, setup(precision=Precision.fp32))
    assert bf16.loss_bytes - fp32.loss_bytes == 4 * T * V
    assert fp32.logits_bytes == 2 * bf16.logits_bytes == 4 * T * V


def test_t5_loss_runs_on_16_bit_logits():
    """T5ForConditionalGeneration calls CrossEntropyLoss on the bf16 logits: no fp32 copy."""
    est = activation_bytes(T5_BASE, setup(seq_len=512))
    assert est.loss_bytes == 2 * 512 * 32128 + 8 * 512


def test_gemma2_soft_capping_keeps_a_vocabulary_sized_tanh():
    est = activation_bytes(GEMMA2_9B, setup(seq_len=8192))
    assert est.logit_softcap_bytes == est.logits_bytes == 2 * 8192 * 256000
    assert activation_bytes(LLAMA2_7B, setup()).logit_softcap_bytes == 0


def test_large_vocabulary_logits_block_is_the_largest_line():
    est = activation_bytes(GEMMA2_9B, setup(seq_len=8192, checkpointing=Checkpointing.full))
    head = est.logits_bytes + est.logit_softcap_bytes + est.loss_bytes
    assert head > est.layers_bytes and head > est.recompute_bytes


def test_moe_grows_with_experts_per_token():
    one, two = (activation_bytes(replace(MIXTRAL, num_experts_per_tok=k), setup()) for k in (1, 2))
    dense = activation_bytes(replace(MIXTRAL, num_experts=0, num_experts_per_tok=0), setup())
    assert dense.per_layer_bytes < one.per_layer_bytes < two.per_layer_bytes
    # each routed token keeps the expert MLP's 4 f tensors again
    assert two.per_layer_bytes - one.per_layer_bytes > 4 * 2 * 2048 * 14336


def test_dropout_masks_cost_one_byte_per_element():
    no_dropout = replace(GPT2, dropout=0.0, attention_dropout=0.0)
    b, s, h, a = 1, 1024, 768, 12
    eager = setup(seq_len=s, attention=Attention.eager)
    diff = activation_bytes(GPT2, eager).per_layer_bytes - activation_bytes(no_dropout, eager).per_layer_bytes
    assert diff == 2 * b * s * h + (1 + 2) * a * s * s  # 2 residual masks; probability mask + dropped copy


def test_assumptions_name_the_attention_and_checkpointing():
    est = activation_bytes(MIXTRAL, setup(checkpointing=Checkpointing.full))
    text = " ".join(est.assumptions)
    assert "flash" in text and "full checkpointing" in text and "MoE" in text
    assert isinstance(est, ActivationEstimate)


def test_activation_modules_are_pure():
    code = ("import sys, zeroplan.memory.activations, zeroplan.memory.activations.terms, zeroplan.memory.activations.traits\n"
            "print([m for m in ('rich', 'typer', 'yaml', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
