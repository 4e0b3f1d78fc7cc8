"""Korthikanti et al. 2022 (arXiv:2205.05198): its Table 2 formulas, Table 3 setups and the figures its text states,
and how Megatron-LM's estimator (zeroplan.megatron.theory) relates to them."""

from dataclasses import replace
from pathlib import Path

import pytest

from zeroplan.megatron.korthikanti import (
    SETUPS,
    Row,
    Setup,
    first_stage_activation_bytes,
    layer_activation_bytes,
    layers_in_flight,
    reduction_over_baseline,
    selective_saving,
)
from zeroplan.megatron.theory import MegatronArgs, activation_bytes_with_sp, activation_bytes_without_sp

BY_NAME = {s.name: s for s in SETUPS}


def test_table3_setups():
    """Table 3: heads, hidden, layers, t, p, GPUs, global and micro-batch (s = 2048, v = 51200)."""
    got = [(s.name, s.heads, s.hidden, s.layers, s.tp, s.pp, s.gpus, s.global_batch, s.micro_batch) for s in SETUPS]
    assert got == [("22B", 64, 6144, 48, 8, 1, 8, 4, 4), ("175B", 96, 12288, 96, 8, 8, 64, 64, 1),
                   ("530B", 128, 20480, 105, 8, 35, 280, 280, 1), ("1T", 160, 25600, 128, 8, 64, 512, 512, 1)]
    for s in SETUPS:  # no data parallelism in Table 3: the GPUs are exactly t x p
        assert s.gpus == s.tp * s.pp


def test_table2_rows_from_the_section_4_terms():
    """Each Table 2 row recomputed from section 4.1's tensor list (attention 11 sbh + 5 as^2 b, MLP 19 sbh,
    LayerNorms 4 sbh), split as section 4.2 splits it, on GPT-3 175B's shape."""
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh, scores = s * b * h, 5 * a * s * s * b
    attention = [2, 1, 2, 4, 2]  # out-proj input, its dropout mask, qkv input, q and k, v (the 5 as^2 b apart)
    mlp = [2, 8, 8, 1]  # fc1 input, GeLU input, fc2 input, dropout mask
    norms = [2, 2]
    assert sum(attention) + sum(mlp) + sum(norms) == 34
    # replicated under TP: the two norm inputs, two dropout masks, and the inputs of the two column linears
    replicated = 2 + 2 + 1 + 1 + 2 + 2
    assert replicated == 10
    # split by t: q and k, v, the out-projection input, the GeLU input, fc2's input
    assert 4 + 2 + 2 + 8 + 8 == 34 - replicated
    assert layer_activation_bytes(Row.none, s, b, h, a) == 34 * sbh + scores
    assert layer_activation_bytes(Row.tp, s, b, h, a, t) == pytest.approx(10 * sbh + 24 * sbh / t + scores / t)
    assert layer_activation_bytes(Row.tp_sp, s, b, h, a, t) == pytest.approx((34 * sbh + scores) / t)
    assert layer_activation_bytes(Row.tp_selective, s, b, h, a, t) == pytest.approx(10 * sbh + 24 * sbh / t)
    assert layer_activation_bytes(Row.tp_sp_selective, s, b, h, a, t) == pytest.approx(34 * sbh / t)
    assert layer_activation_bytes(Row.full, s, b, h, a, t) == 2 * sbh


@pytest.mark.parametrize(("name", "stated"), [("175B", 0.70), ("530B", 0.65)], ids=["section5-gpt3-70pct",
                                                                                  "section5-mtnlg-65pct"])
def test_selective_recompute_saving_section_5(name, stated):
    """Section 5: selective recompute saves 70% of GPT-3's activations (5as/h = 80) and 65% of MT-NLG's (64)."""
    assert round(selective_saving(BY_NAME[name]), 2) == stated


def test_about_5x_over_the_tensor_parallel_baseline_abstract():
    """The abstract: sequence parallelism with selective recompute "reduces activation memory by 5x": per layer
    the baseline over TP + SP + selective is 6.2x (22B), 5.4x (175B), 4.9x (530B, 1T)."""
    got = [round(reduction_over_baseline(s), 1) for s in SETUPS]
    assert got == [6.2, 5.4, 4.9, 4.9]


def test_pipeline_first_stage_keeps_L_layers_section_4_2_3():
    """1F1B: p micro-batches x L/p layers = L, whatever p; interleaved: L (1 + (p - 1) / (p m))."""
    assert layers_in_flight(96, 8) == 96
    assert layers_in_flight(96, 8, chunks=3) == pytest.approx(96 * (1 + 7 / 24))
    one = replace(BY_NAME["175B"], pp=1)
    per_layer = layer_activation_bytes(Row.tp_sp_selective, 2048, 1, 12288, 96, 8)
    stage = first_stage_activation_bytes(Row.tp_sp_selective, BY_NAME["175B"])
    assert stage == pytest.approx(96 * per_layer + 2048 * 12288 * 8 / 8)
    # p = 1 adds the output layer and the fp32 loss, 4 s b h / t (1 + v / h)
    assert first_stage_activation_bytes(Row.tp_sp_selective, one) == pytest.approx(
        96 * per_layer + 2048 * 12288 / 8 + 4 * 2048 * 12288 / 8 * (1 + 51200 / 12288))


def _megatron_args(s: Setup, **kw) -> MegatronArgs:
    return MegatronArgs(num_layers=s.layers, hidden_size=s.hidden, ffn_hidden_size=4 * s.hidden,
                        num_attention_heads=s.heads, num_query_groups=s.heads, group_query_attention=False,
                        kv_channels=s.hidden // s.heads, swiglu=False, normalization="LayerNorm",
                        padded_vocab_size=s.vocab, untie_embeddings_and_output_weights=True, add_bias_linear=True,
                        world_size=s.gpus, tensor_model_parallel_size=s.tp, pipeline_model_parallel_size=s.pp,
                        data_parallel_size=1, seq_length=s.seq_len, micro_batch_size=s.micro_batch, **kw)


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
def test_megatron_estimator_is_the_paper_plus_token_ids(setup):
    """Megatron-LM's theoretical_memory_usage.py with SP + selective is the paper's first-stage figure (TP + SP +
    selective row, f = 4h so 18 + 4f/h = 34) plus 8 s b p / t bytes of token ids; without SP it is the "TP +
    selective" row (no attention-score term, whatever the recompute) with the same additions, times 1.05, and
    its p = 1 output term is 2 s b (v / t + h), not the paper's 4 s b h / t (1 + v / h)."""
    s, b, p, t = setup.seq_len, setup.micro_batch, setup.pp, setup.tp
    ids = 8 * s * b * p
    with_sp = activation_bytes_with_sp(_megatron_args(setup, sequence_parallel=True,
                                                      recompute_granularity="selective"), None)
    assert with_sp == pytest.approx(first_stage_activation_bytes(Row.tp_sp_selective, setup) + ids / t, rel=1e-12)
    without = activation_bytes_without_sp(_megatron_args(setup), None)
    paper = layers_in_flight(setup.layers, p) * layer_activation_bytes(Row.tp_selective, s, b, setup.hidden,
                                                                       setup.heads, t)
    output = 2 * (s * b * setup.vocab / t + s * b * setup.hidden) if p == 1 else 0
    assert without == pytest.approx((paper + ids + s * b * setup.hidden * p + output) * 1.05, rel=1e-12)


TABLE_ROWS = (Row.tp, Row.tp_sp, Row.tp_selective, Row.tp_sp_selective, Row.full)


def setups_table() -> str:
    """Each Table 3 setup's first-stage activations (GiB) under the Table 2 rows, as docs/megatron.md shows them."""
    lines = ["| setup | " + " | ".join(r.value for r in TABLE_ROWS) + " | TP + SP + selective / baseline |",
             "|---|" + "---:|" * (len(TABLE_ROWS) + 1)]
    for s in SETUPS:
        gib = [first_stage_activation_bytes(r, s) / 2**30 for r in TABLE_ROWS]
        lines.append(f"| {s.name} | " + " | ".join(f"{g:.1f}" for g in gib) + f" | {gib[3] / gib[0]:.1%} |")
    return "\n".join(lines)


def test_docs_table_is_what_the_formulas_give():
    docs = (Path(__file__).parent.parent / "docs" / "megatron.md").read_text()
    assert setups_table() in docs
