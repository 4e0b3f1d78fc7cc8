"""The peers' formulas as benchmarks/peers.py restates them, against the peers' own published vectors.

Vectors: (R) the peer's script run unmodified at the commit named, (D) its docs or tests. A restatement that
reproduces them can be trusted for the other questions in docs/comparison.md.
"""

from __future__ import annotations

import pytest

peers = pytest.importorskip("benchmarks.peers", reason="benchmarks/ ships only in the repository")

GIB = 2**30


def gib(x: float) -> float:
    return round(x / GIB, 2)


# EleutherAI cookbook README examples (EleutherAI/cookbook@827ee3b:README.md), outputs verbatim (R): per GPU act / model / grad / opt / comm, total.
COOKBOOK = [
    pytest.param(peers.CookbookRun(32, 4096, 32, batch_size_per_gpu=8, checkpoint_activations=True,
                                   partition_activations=True, tensor_parallel_size=2, num_gpus=128),
                 6.87, (34.00, 6.40, 25.60, 0.60, 0.93), 67.53, id="pythia-6.9b-tp2-128gpus"),
    pytest.param(peers.CookbookRun(36, 5120, 40, batch_size_per_gpu=8, checkpoint_activations=True,
                                   partition_activations=True, tensor_parallel_size=4, num_gpus=256),
                 11.86, (23.91, 5.52, 44.19, 0.52, 0.93), 75.06, id="pythia-12b-tp4-256gpus"),
    pytest.param(peers.CookbookRun(44, 6144, 64, checkpoint_activations=True, partition_activations=True),
                 20.58, (17.53, 38.32, 76.65, 229.95, 0.00), 362.45, id="20b-defaults-1gpu"),
    pytest.param(peers.CookbookRun(32, 4096, 32, sequence_length=4096, ffn_expansion_factor=3.5),
                 6.34, (97.00, 11.81, 23.63, 70.89, 0.00), 203.33, id="llama-7b-readme"),
]


@pytest.mark.parametrize(("run", "billions", "terms", "total"), COOKBOOK)
def test_cookbook_readme_examples(run, billions, terms, total):
    out = peers.cookbook_memory(run)
    assert round(peers.cookbook_params(run) / 1e9, 2) == billions
    assert tuple(gib(x) for x in (out.activations, out.parameters, out.gradients, out.optimizer_states, out.buffers)) == terms
    assert abs(gib(out.total) - total) <= 0.01, "the README total is the rounded sum of unrounded terms"


# llm-analysis at cli99/llm-analysis@d841e40 (R): Llama-2-shaped config, a100-sxm-80gb, s 4096, b 1, 8 GPUs. Exact bytes.
LLAMA2_SHAPE = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=32, ffn_size=11008,
                    vocab_size=32000, gated=True, seq_len=4096, batch_size_per_gpu=1, dp=8)
LLM_ANALYSIS = [
    pytest.param(0, 4, True, (13_214_687_232, 26_429_374_464, 79_288_123_392, 1_436_549_120, 119_741_718_528), id="zero0-full"),
    pytest.param(3, 4, True, (1_651_835_904, 3_303_671_808, 9_911_015_424, 1_436_549_120, 15_676_056_576), id="zero3-full"),
    pytest.param(2, 0, True, (13_214_687_232, 3_303_671_808, 9_911_015_424, 19_589_496_832, 43_524_732_928), id="zero2-flash"),
    pytest.param(2, 0, False, (13_214_687_232, 3_303_671_808, 9_911_015_424, 86_127_935_488, 110_063_171_584), id="zero2-eager"),
]


@pytest.mark.parametrize(("zero", "recompute", "flash", "expected"), LLM_ANALYSIS)
def test_llm_analysis_vectors(zero, recompute, flash, expected):
    run = peers.LlmAnalysisRun(**LLAMA2_SHAPE, ds_zero=zero, recompute=recompute, flash_attn=flash)
    out = peers.llm_analysis_memory(run)
    assert peers.llm_analysis_params(run) == 6_607_343_616
    assert (out.parameters, out.gradients, out.optimizer_states, out.activations, out.total) == expected


def test_accelerate_bert_base_cased():
    # accelerate's test_transformers_model (D): total 433,249,280 B in fp32; docs table: training 1.61 GB / 826.36 MB.
    fp32 = 433_249_280
    assert peers.accelerate_training_bytes(fp32, "float32") == 4 * fp32
    assert round(peers.accelerate_training_bytes(fp32, "float32") / GIB, 2) == 1.61
    assert round(peers.accelerate_training_bytes(fp32, "float16") / 2**20, 2) == 826.36


def test_deepspeed_terms_add_up_to_its_own_number():
    # DeepSpeed's Llama-2-7b print on 4 GPUs (estimate_zero3_model_states_mem_needs_all_live): ZeRO-3 none/none
    # 28.73 "GB" (GiB).
    zero2, zero3 = peers.deepspeed_memory(6_738_415_616, 131_072_000, 4, 1)
    assert round(zero3.total / GIB, 2) == 28.73
    for row in (zero2, zero3):
        assert abs(row.parameters + row.gradients + row.optimizer_states + (row.buffers or 0) - row.total) < 1


def test_report_builds_from_documented_formulas_without_any_peer(monkeypatch):
    compare = pytest.importorskip("benchmarks.compare_peers")
    monkeypatch.setattr(compare, "run_driver", lambda *args: None)  # as on a machine without the peers
    report = compare.build("python")
    for q in compare.QUESTIONS:
        assert f"## {q.title}" in report
    assert "DeepSpeed was not installed" in report and "its git HEAD d841e40 formulas, restated" in report
    assert report.count("| zeroplan | ZeRO-3 |") == len(compare.QUESTIONS)
    assert "| EleutherAI cookbook | - | - | - | - | n/a: decoder-only formulas" in report  # t5-3b
