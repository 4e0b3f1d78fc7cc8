"""The advisor: every branch of both trees pinned by its sequence of rule ids, the article's leaves one by one,
the advisories, and the invariant that nothing recommended fails the calculator.

Scenarios are bare parameter counts (activations 0) on real hardware presets; the checkpointing branches use a
stand-in activation model (monkeypatched), so no test depends on activation numbers.
"""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zeroplan.advise.advisor import advise, recommended_scenario
from zeroplan.advise.candidates import preference
from zeroplan.advise.policy import ARTICLE, DEFAULT, with_overrides
from zeroplan.advise.trees.article import (
    LEAF_BATCH_NO,
    LEAF_BATCH_YES,
    LEAF_GIVE_UP,
    LEAF_ZERO0,
    LEAF_ZERO2,
    LEAF_ZERO3,
)
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import Topology
from zeroplan.memory import estimate
from zeroplan.memory.capacity import budget_bytes, gpu_layouts
from zeroplan.memory.engines import supported_stages
from zeroplan.memory.estimate import Scenario, evaluate, overheads_for
from zeroplan.memory.setup import (
    Checkpointing,
    Engine,
    OffloadDevice,
    Optimizer,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.memory.states import ModelSummary
from zeroplan.models.architecture import Architecture

H100 = load_hardware("h100-sxm-80gb")
H100_PCIE = load_hardware("h100-pcie-80gb")
V100 = load_hardware("v100-sxm-32gb")
FITS = ("fit.zero0", "fit.zero1", "fit.zero2", "fit.zero3")
OFFLOADS = ("offload.optimizer-cpu", "offload.param-cpu", "offload.nvme")
CPU, NONE, NVME = OffloadDevice.cpu, OffloadDevice.none, OffloadDevice.nvme
GIB = 2**30


def bare(num_params: float, gpus: int = 8, nodes: int = 1, hw=H100, embedding: int = 0, arch=None, **setup) -> Scenario:
    n = int(num_params)
    return Scenario(model=ModelSummary(name="m", num_params=n, largest_layer_params=n // 100,
                                       num_embedding_params=embedding),
                    arch=arch, setup=TrainingSetup(**setup), parallelism=Parallelism(gpus=gpus, nodes=nodes),
                    hardware=hw, overheads=overheads_for(hw, None, None, None))


def on(engine: Engine, scn: Scenario) -> Scenario:
    return replace(scn, engine=engine)


def rec_key(advice):
    r = advice.recommendation
    return r.fits, r.stage, r.offload_optimizer, r.offload_param


# --- the default tree, branch by branch (H100 80 GB x 8, bf16-mixed AdamW: 16 B/param) ----------------------------


# DeepSpeed keeps ZeRO-3's gradient partitions on the CPU under optimizer offload (stage3.py, docs/formulas.md),
# so with no limit on host memory full offload fits any bare count: the fewest-GPUs branch needs a host limit.
HOST_2048 = with_overrides(DEFAULT, {"host_memory_gib_per_node": 2048}, "test")


@pytest.mark.parametrize(
    ("num_params", "rules", "expected", "policy"),
    [
        pytest.param(1e9, ("fit.zero0", "batch.micro"), (True, ZeroStage.zero0, NONE, NONE), DEFAULT, id="zero0"),
        pytest.param(9e9, FITS[:2] + ("overlap.comm", "batch.micro"), (True, ZeroStage.zero1, NONE, NONE), DEFAULT,
                     id="zero1"),
        pytest.param(18e9, FITS[:3] + ("overlap.comm", "batch.micro"), (True, ZeroStage.zero2, NONE, NONE), DEFAULT,
                     id="zero2"),
        pytest.param(30e9, FITS + ("batch.micro", "zero3.overhead"), (True, ZeroStage.zero3, NONE, NONE), DEFAULT,
                     id="zero3"),
        pytest.param(50e9, FITS + ("ckpt.unmodelled", OFFLOADS[0], "batch.micro", "zero3.overhead"),
                     (True, ZeroStage.zero3, CPU, NONE), DEFAULT, id="optimizer-offload"),
        pytest.param(300e9, FITS + ("ckpt.unmodelled",) + OFFLOADS[:2] + ("batch.micro", "zero3.overhead"),
                     (True, ZeroStage.zero3, CPU, CPU), DEFAULT, id="param-offload"),
        pytest.param(400e9, FITS + ("ckpt.unmodelled",) + OFFLOADS + ("gpus.min",), (False, None, None, None),
                     HOST_2048, id="fewest-gpus"),
    ],
)
def test_default_tree_branches(num_params, rules, expected, policy):
    advice = advise(bare(num_params), exact(policy), global_batch=512)
    assert advice.rules == rules
    assert rec_key(advice) == expected


def exact(policy):
    """`policy` with no headroom kept (the tree's branches tested at the calculator's own boundaries)."""
    return with_overrides(policy, {"min_headroom_fraction": 0.0}, "test")


def test_overlap_comm_only_when_its_second_bucket_fits():
    tight = advise(bare(13e9), exact(DEFAULT), global_batch=512)
    assert tight.rules == FITS[:2] + ("overlap.comm", "batch.micro")
    step = tight.trace[2]
    assert step.outcome == "no" and step.observed > step.threshold and "second reduce bucket" in step.reason
    assert step.source.startswith("deepspeedai/DeepSpeed@edaa7221:deepspeed/runtime/zero/stage_1_and_2.py: "
                                  "overlap_comm doubles the reduce bucket in stages 1-2")
    assert tight.recommendation.knobs.overlap_comm is False and tight.recommendation.plan.overlap_comm is False
    roomy = advise(bare(9e9), DEFAULT, global_batch=512)
    assert roomy.trace[2].outcome == "yes" and roomy.recommendation.knobs.overlap_comm is True
    assert advise(bare(1e9), DEFAULT, global_batch=512).recommendation.knobs.overlap_comm is False  # stage 0
    assert advise(bare(30e9), DEFAULT, global_batch=512).recommendation.knobs.overlap_comm is True  # stage 3 default


def test_offload_to_nvme_when_the_host_cannot_hold_the_states():
    # 1500 GiB: the NVMe plan's host share is the 16-bit and fp32 gradient partitions (1125 GiB per node)
    policy = with_overrides(DEFAULT, {"host_memory_gib_per_node": 1500}, "test")
    advice = advise(bare(200e9), policy, global_batch=512)
    assert advice.rules == FITS + ("ckpt.unmodelled",) + OFFLOADS + ("batch.micro", "zero3.overhead")
    assert rec_key(advice) == (True, ZeroStage.zero3, NVME, NVME)
    assert "host memory" in advice.trace[-4].reason  # param-cpu fits the GPU but not the host
    assert advice.recommendation.plan.cpu_bytes_per_node <= 1500 * 2**30


def test_without_zero1_the_default_tree_goes_to_zero2():
    policy = with_overrides(DEFAULT, {"consider_zero1": False}, "test")
    advice = advise(bare(9e9), policy, global_batch=512)
    assert advice.rules == ("fit.zero0", "fit.zero2", "overlap.comm", "batch.micro")
    assert advice.recommendation.stage is ZeroStage.zero2
    assert advice.alternatives[0].stage is ZeroStage.zero2  # the recommendation first, whatever the order


def test_without_offload_nothing_fits_and_more_gpus_is_the_answer():
    policy = with_overrides(DEFAULT, {"consider_offload": False}, "test")
    advice = advise(bare(50e9), policy, global_batch=512)
    assert advice.rules == FITS + ("ckpt.unmodelled", "gpus.min")
    change = advice.recommendation.change
    assert (change.kind, change.stage, change.gpus, change.nodes) == ("gpus", ZeroStage.zero3, 16, 2)
    at = replace(advice.scenario, parallelism=Parallelism(gpus=16, nodes=2))
    assert evaluate(at, ZeroStage.zero3).fits
    assert not any(evaluate(replace(advice.scenario, parallelism=p), s).fits
                   for p in gpu_layouts(8)[:8] for s in ZeroStage)


def test_the_smallest_change_for_a_model_too_large_for_8_gpus():
    advice = advise(bare(400e9), HOST_2048, global_batch=512)
    rec, step = advice.recommendation, advice.trace[-1]
    assert not rec.fits and rec.stage is None and rec.plan is None and advice.alternatives == ()
    assert (step.outcome, step.observed, step.threshold, step.unit) == ("change", rec.change.gpus, 8, "gpus")
    assert rec.change.gpus % 8 == 0 and rec.change.nodes == rec.change.gpus // 8


def test_nothing_fits_on_any_gpu_count():
    policy = with_overrides(DEFAULT, {"max_gpus": 64}, "test")
    advice = advise(bare(1e13), policy, global_batch=512)
    assert advice.rules[-1] == "gpus.min"
    assert advice.recommendation.change.kind == "none"
    assert advice.trace[-1].outcome == "none" and "64 GPUs" in advice.trace[-1].reason


def test_bf16_becomes_fp16_on_hardware_without_it():
    advice = advise(bare(1e9, hw=V100), DEFAULT, global_batch=64)
    assert advice.rules == ("precision.fp16", "fit.zero0", "batch.micro")
    assert advice.scenario.setup.precision is Precision.fp16_mixed
    assert advise(bare(1e9, hw=V100), ARTICLE, global_batch=64).rules == ("precision.fp16", "article.zero0-fits")


def test_fit_steps_carry_the_calculator_numbers():
    advice = advise(bare(18e9), DEFAULT, global_batch=512)
    for step, stage in zip(advice.trace[:3], ZeroStage):
        est = evaluate(advice.scenario, stage)
        budget = budget_bytes(est.usable_bytes, DEFAULT.min_headroom_fraction)  # the default headroom kept free
        assert (step.observed, step.threshold, step.unit) == (est.total, budget, "bytes")
        assert step.outcome == ("yes" if est.total <= budget else "no")


def test_headroom_fraction_tightens_the_fit():
    loose = advise(bare(18e9), exact(DEFAULT), global_batch=512)
    tight = advise(bare(18e9), with_overrides(DEFAULT, {"min_headroom_fraction": 0.2}, "test"), global_batch=512)
    assert loose.recommendation.stage is ZeroStage.zero2 and tight.recommendation.stage is ZeroStage.zero3
    step = tight.trace[2]
    assert step.threshold == budget_bytes(int(H100.memory_gib * GIB), 0.2) < loose.trace[2].threshold
    assert "set by test" in step.source


# --- micro-batch and checkpointing, with a stand-in activation model ----------------------------------------------

ARCH = Architecture(family="llama", hidden_size=4096, num_layers=32, num_attention_heads=32, num_key_value_heads=8,
                    head_dim=128, intermediate_size=14336, vocab_size=128256, gated_mlp=True, norm="rmsnorm",
                    tie_word_embeddings=False)


@pytest.fixture
def activations(monkeypatch):
    """Activation bytes per sequence by checkpointing level; set .per_seq in the test."""
    model = SimpleNamespace(per_seq={Checkpointing.none: 0, Checkpointing.selective: 0, Checkpointing.full: 0})

    def fake(arch, setup):
        if arch is None:
            return None
        return SimpleNamespace(total_bytes=int(model.per_seq[setup.checkpointing] * setup.micro_batch), assumptions=())

    monkeypatch.setattr(estimate, "activations_for", fake)
    return model


def _levels(none, selective, full):
    return {Checkpointing.none: none * GIB, Checkpointing.selective: selective * GIB, Checkpointing.full: full * GIB}


@pytest.mark.parametrize(
    ("per_seq", "rules", "stage", "ckpt", "offload"),
    [
        pytest.param((10, 5, 1), FITS[:2] + ("overlap.comm", "batch.micro"), ZeroStage.zero1, Checkpointing.none, NONE,
                     id="no-ckpt"),
        pytest.param((90, 20, 5), FITS + ("ckpt.selective", "overlap.comm", "batch.micro"), ZeroStage.zero1,
                     Checkpointing.selective, NONE, id="selective"),
        pytest.param((90, 60, 30), FITS + ("ckpt.selective", "ckpt.full", "overlap.comm", "batch.micro"), ZeroStage.zero2,
                     Checkpointing.full, NONE, id="full"),
        pytest.param((90, 90, 60), FITS + ("ckpt.selective", "ckpt.full", OFFLOADS[0], "batch.micro", "zero3.overhead"),
                     ZeroStage.zero3, Checkpointing.full, CPU, id="offload-and-full-ckpt"),
        pytest.param((60, 60, 60), FITS + ("ckpt.selective", "ckpt.full", OFFLOADS[0], "batch.micro", "zero3.overhead"),
                     ZeroStage.zero3, Checkpointing.none, CPU, id="offload-relaxes-ckpt"),
    ],
)
def test_checkpointing_only_when_needed(activations, per_seq, rules, stage, ckpt, offload):
    activations.per_seq = _levels(*per_seq)
    advice = advise(bare(9e9, arch=ARCH), DEFAULT, global_batch=512)
    assert advice.rules == rules
    rec = advice.recommendation
    assert (rec.stage, rec.checkpointing, rec.offload_optimizer) == (stage, ckpt, offload)


def test_given_full_checkpointing_adds_no_checkpointing_step(activations):
    activations.per_seq = _levels(90, 90, 90)
    advice = advise(bare(9e9, arch=ARCH, checkpointing=Checkpointing.full), DEFAULT, global_batch=512)
    assert "ckpt.selective" not in advice.rules and "ckpt.full" not in advice.rules


def test_the_largest_micro_batch_that_fits_and_divides(activations):
    activations.per_seq = _levels(7, 3, 1)
    advice = advise(bare(9e9, arch=ARCH), DEFAULT, global_batch=8 * 48)
    rec, step = advice.recommendation, advice.trace[-1]
    assert step.rule == "batch.micro" and step.threshold == 48
    scn = recommended_scenario(advice)
    assert evaluate(scn, rec.stage).fits
    divisors = [d for d in range(1, 49) if 48 % d == 0]
    bigger = divisors[divisors.index(rec.micro_batch) + 1]
    over = replace(scn, setup=replace(scn.setup, micro_batch=bigger))
    assert not evaluate(over, rec.stage).fits
    assert rec.micro_batch * rec.grad_accum * rec.gpus == 8 * 48


# --- the article's tree, leaf by leaf --------------------------------------------------------------------------

A_FITS = ("article.zero0-fits", "article.zero2-fits")
ZERO3_PATH = A_FITS + ("article.nvlink", "article.batch-512", "guard.fits")


@pytest.mark.parametrize(
    ("scn", "topology", "batch", "rules", "stage", "leaf"),
    [
        pytest.param(bare(1e9), None, 512, A_FITS[:1], ZeroStage.zero0, LEAF_ZERO0, id="zero0"),
        pytest.param(bare(9e9), None, 512, A_FITS, ZeroStage.zero2, LEAF_ZERO2, id="zero2-not-zero1"),
        pytest.param(bare(30e9), Topology.pcie, 512, A_FITS + ("article.nvlink",), None, LEAF_GIVE_UP, id="pcie"),
        pytest.param(bare(30e9, gpus=16, nodes=2), None, 512, A_FITS + ("article.nvlink",), None, LEAF_GIVE_UP,
                     id="multinode-literal"),
        pytest.param(bare(30e9), None, 1024, ZERO3_PATH, ZeroStage.zero3, f"{LEAF_ZERO3}; {LEAF_BATCH_YES}",
                     id="zero3-batch-over-512"),
        pytest.param(bare(30e9), None, 512, ZERO3_PATH, ZeroStage.zero3, f"{LEAF_ZERO3}; {LEAF_BATCH_NO}",
                     id="zero3-batch-512"),
    ],
)
def test_article_tree_leaf_by_leaf(scn, topology, batch, rules, stage, leaf):
    advice = advise(scn, ARTICLE, topology, global_batch=batch)
    assert advice.rules == rules
    assert advice.recommendation.stage == stage and advice.recommendation.fits == (stage is not None)
    assert advice.recommendation.summary == leaf
    assert advice.advisories == ()


def test_article_leaves_are_the_outcomes_of_their_questions():
    zero3 = advise(bare(30e9), ARTICLE, global_batch=512)
    assert [s.reason for s in zero3.trace[2:4]] == [LEAF_ZERO3, LEAF_BATCH_NO]
    assert [s.outcome for s in zero3.trace] == ["no", "no", "yes", "no", "yes"]
    assert zero3.trace[0].source.startswith("article 4.3 decision tree (docs/advisor.md); ")
    pcie = advise(bare(30e9), ARTICLE, Topology.pcie, global_batch=512)
    assert (pcie.trace[-1].observed, pcie.trace[-1].threshold, pcie.trace[-1].reason) == ("pcie", "nvlink", LEAF_GIVE_UP)


def test_article_zero3_that_does_not_fit_is_not_recommended():
    advice = advise(bare(50e9), ARTICLE, global_batch=1024)
    assert advice.rules == ZERO3_PATH
    assert advice.trace[-1].outcome == "no" and not advice.recommendation.fits
    assert advice.recommendation.stage is None


def test_article_tree_runs_micro_batch_1():
    rec = advise(bare(9e9), ARTICLE, global_batch=512).recommendation
    assert (rec.micro_batch, rec.grad_accum, rec.checkpointing) == (1, 64, Checkpointing.none)


def test_multinode_counts_as_nvlink_when_the_policy_says_so():
    policy = with_overrides(ARTICLE, {"zero3_topologies": "nvlink,multinode".split(",")}, "--set")
    advice = advise(bare(30e9, gpus=16, nodes=2), policy, global_batch=1024)
    assert advice.rules == ZERO3_PATH and advice.recommendation.stage is ZeroStage.zero3
    assert advice.trace[2].source == "set by --set"


# --- advisories ----------------------------------------------------------------------------------------------


def advisories(advice):
    return tuple(s.rule for s in advice.advisories)


def test_advisories_on_nvlink_with_zero3():
    advice = advise(bare(30e9, seq_len=2048), DEFAULT, global_batch=512)
    assert advisories(advice) == ("advice.long-sequence", "correct.grad-accum")
    step = advice.advisories[-1]
    assert "does not amortize" in step.reason and step.outcome == "corrected"


def test_short_sequences_and_low_stages_get_no_advisory():
    assert advisories(advise(bare(1e9, seq_len=1024), DEFAULT, global_batch=512)) == ()


def test_pcie_advisory_and_overhead_warning():
    advice = advise(bare(30e9, hw=H100_PCIE, seq_len=1024), DEFAULT, global_batch=8)
    assert advice.rules[-1] == "zero3.overhead" and advice.trace[-1].outcome == "warn"
    assert advice.trace[-1].observed > advice.trace[-1].threshold == 11.0
    assert advisories(advice) == ("advice.pcie-zero2", "correct.grad-accum")


def test_multinode_corrects_one_bit_adam_with_zeropp():
    zero3 = advise(bare(60e9, gpus=16, nodes=2, seq_len=1024), DEFAULT, global_batch=16)
    assert zero3.recommendation.stage is ZeroStage.zero3
    assert advisories(zero3)[0] == "correct.onebit-adam"
    assert "not compatible with ZeRO-3" in zero3.advisories[0].reason and "ZeRO++" in zero3.advisories[0].reason
    assert "(deepspeedai/DeepSpeed@edaa7221:deepspeed/runtime/engine.py)" in zero3.advisories[0].source
    assert "ZeRO++ (arXiv:2306.10209; DeepSpeed docs/_tutorials/zeropp.md)" in zero3.advisories[0].source
    zero0 = advise(bare(1e9, gpus=16, nodes=2, seq_len=1024), DEFAULT, global_batch=512)
    assert "stage 0 only" in zero0.advisories[0].reason


def test_embedding_heavy_advisory():
    heavy = advise(bare(2e9, embedding=int(6e8), seq_len=1024), DEFAULT, global_batch=512)
    assert advisories(heavy) == ("advice.embedding-heavy",)
    assert (heavy.advisories[0].observed, heavy.advisories[0].threshold) == (0.3, 0.2)
    light = advise(bare(2e9, embedding=int(1e8), seq_len=1024), DEFAULT, global_batch=512)
    assert advisories(light) == ()


# --- alternatives and inputs ---------------------------------------------------------------------------------


def test_alternatives_fit_and_come_in_order_of_preference():
    advice = advise(bare(18e9), exact(DEFAULT), global_batch=512)
    alts = advice.alternatives
    assert alts[0].key == advice.recommendation.plan.key
    assert list(alts) == sorted(alts, key=preference)
    assert {(a.stage, a.offload_optimizer, a.offload_param) for a in alts} == {
        (ZeroStage.zero2, NONE, NONE), (ZeroStage.zero3, NONE, NONE), (ZeroStage.zero1, CPU, NONE),
        (ZeroStage.zero2, CPU, NONE), (ZeroStage.zero3, CPU, NONE), (ZeroStage.zero3, CPU, CPU),
        (ZeroStage.zero3, NVME, NVME)}
    for alt in alts:
        assert alt.peak_bytes + alt.headroom_bytes == alt.usable_bytes and alt.headroom_bytes >= 0
        assert alt.step_time_s > 0 and alt.micro_batch * alt.grad_accum == 64


def test_bad_inputs_are_errors():
    with pytest.raises(ZeroplanError, match="hardware"):
        advise(bare(1e9, hw=None))
    with pytest.raises(ZeroplanError, match=r"global batch \(12\) must be a positive multiple of the data-parallel degree \(8\)"):
        advise(bare(1e9), global_batch=12)
    with pytest.raises(ZeroplanError, match="talk over PCIe"):
        advise(bare(1e9, hw=H100_PCIE), topology=Topology.nvlink)


def test_default_global_batch_is_the_scenarios():
    rec = advise(bare(1e9, micro_batch=2, grad_accum=3)).recommendation
    assert rec.global_batch == 2 * 3 * 8


def test_advise_is_deterministic():
    assert advise(bare(30e9), global_batch=512) == advise(bare(30e9), global_batch=512)


# --- PyTorch engines: only the stages each engine runs, in its own words, no offload ----------------------------

NOTHING = ("ckpt.unmodelled", "offload.unmodelled", "gpus.min")
FSDP_OFFLOAD = ("ckpt.unmodelled", "offload.param-cpu", "batch.micro", "zero3.overhead")  # CPUOffload, FULL_SHARD


@pytest.mark.parametrize(
    ("engine", "num_params", "rules", "stage", "strategy"),
    [
        pytest.param(Engine.fsdp, 1e9, ("fit.zero0", "batch.micro"), ZeroStage.zero0,
                     "FSDP NO_SHARD (ZeRO-0 equivalent)", id="fsdp-lowest"),
        pytest.param(Engine.fsdp, 9e9, ("fit.zero0", "fit.zero2", "batch.micro"), ZeroStage.zero2,
                     "FSDP SHARD_GRAD_OP (ZeRO-2 equivalent)", id="fsdp-shard-grad-op"),
        pytest.param(Engine.fsdp, 30e9, ("fit.zero0", "fit.zero2", "fit.zero3", "batch.micro", "zero3.overhead"),
                     ZeroStage.zero3, "FSDP FULL_SHARD (ZeRO-3 equivalent)", id="fsdp-full-shard"),
        pytest.param(Engine.fsdp, 60e9, ("fit.zero0", "fit.zero2", "fit.zero3") + NOTHING, None, None,
                     id="fsdp-fewest-gpus"),
        pytest.param(Engine.fsdp2, 1e9, ("fit.zero2", "batch.micro"), ZeroStage.zero2,
                     "FSDP2 fully_shard(reshard_after_forward=False) (ZeRO-2 equivalent)", id="fsdp2-lowest"),
        pytest.param(Engine.fsdp2, 30e9, ("fit.zero2", "fit.zero3", "batch.micro", "zero3.overhead"), ZeroStage.zero3,
                     "FSDP2 fully_shard(reshard_after_forward=True) (ZeRO-3 equivalent)", id="fsdp2-reshard"),
        pytest.param(Engine.fsdp2, 60e9, ("fit.zero2", "fit.zero3") + FSDP_OFFLOAD, ZeroStage.zero3,
                     "FSDP2 fully_shard(reshard_after_forward=True) (ZeRO-3 equivalent)", id="fsdp2-cpu-offload"),
        pytest.param(Engine.ddp, 1e9, ("fit.zero0", "batch.micro"), ZeroStage.zero0, "DDP (ZeRO-0 equivalent)",
                     id="ddp-lowest"),
        pytest.param(Engine.ddp, 4.5e9, ("fit.zero0", "fit.zero1", "batch.micro"), ZeroStage.zero1,
                     "DDP + ZeroRedundancyOptimizer (ZeRO-1 equivalent)", id="ddp-zero-redundancy"),
        pytest.param(Engine.ddp, 6.2e9, ("fit.zero0", "fit.zero1") + NOTHING, None, None, id="ddp-fewest-gpus"),
    ],
)
def test_engine_branches(engine, num_params, rules, stage, strategy):
    advice = advise(on(engine, bare(num_params)), DEFAULT, global_batch=512)
    rec = advice.recommendation
    assert advice.rules == rules
    assert (rec.engine, rec.stage, rec.strategy, rec.fits) == (engine, stage, strategy, stage is not None)
    assert {a.stage for a in advice.alternatives} <= set(supported_stages(engine))
    offloads = {(NONE, NONE)} | ({(CPU, CPU)} if engine is Engine.fsdp2 else set())  # all or nothing
    assert all((a.offload_optimizer, a.offload_param) in offloads for a in advice.alternatives)
    assert advice.advisories == ()
    if rec.fits:
        assert rec.summary.startswith(strategy) and rec.knobs is None
        if rec.offload_optimizer is NONE:
            assert strategy in advice.trace[len(rules) - (3 if stage is ZeroStage.zero3 else 2)].question
        assert evaluate(recommended_scenario(advice), rec.stage).fits
    else:
        change = rec.change
        assert change.kind == "gpus" and change.gpus > 8 and change.stage in supported_stages(engine)
        at = replace(advice.scenario, parallelism=Parallelism(gpus=change.gpus, nodes=change.nodes))
        assert evaluate(at, change.stage).fits
        assert advice.trace[-2].outcome == "skipped" and "DeepSpeed's offload only" in advice.trace[-2].reason


def test_engine_settings_are_the_engines_own():
    fsdp = advise(on(Engine.fsdp, bare(30e9)), DEFAULT, global_batch=512).recommendation
    assert fsdp.engine_settings == {"sharding_strategy": "FULL_SHARD"}
    fsdp2 = advise(on(Engine.fsdp2, bare(1e9)), DEFAULT, global_batch=512).recommendation
    assert fsdp2.engine_settings == {"reshard_after_forward": False}
    ddp = advise(on(Engine.ddp, bare(4.5e9)), DEFAULT, global_batch=512).recommendation
    assert ddp.engine_settings == {"gradient_as_bucket_view": False, "zero_redundancy_optimizer": True}
    deepspeed = advise(bare(30e9), DEFAULT, global_batch=512).recommendation
    assert (deepspeed.engine, deepspeed.strategy, deepspeed.engine_settings) == (Engine.deepspeed, "ZeRO-3", {})


def test_ddp_that_never_fits_points_at_fsdp():
    advice = advise(on(Engine.ddp, bare(30e9)), DEFAULT, global_batch=512)
    assert advice.recommendation.change.kind == "none" and "--engine fsdp" in advice.trace[-1].reason


def test_the_article_tree_is_deepspeeds():
    with pytest.raises(UsageError, match="article's tree of DeepSpeed ZeRO stages.*--policy default with --engine fsdp"):
        advise(on(Engine.fsdp, bare(1e9)), ARTICLE, global_batch=512)


# --- the invariant ------------------------------------------------------------------------------------------

HARDWARE = [load_hardware(n) for n in ("h100-sxm-80gb", "a100-sxm-40gb", "l4-24gb", "v100-sxm-32gb", "h100-pcie-80gb")]


@given(
    num_params=st.floats(min_value=8.0, max_value=12.7).map(lambda e: int(10**e)),
    layout=st.sampled_from([(1, 1), (2, 1), (4, 1), (8, 1), (16, 2)]),
    hw=st.sampled_from(HARDWARE),
    precision=st.sampled_from(list(Precision)),
    optimizer=st.sampled_from(list(Optimizer)),
    per_gpu=st.sampled_from([1, 2, 3, 8, 64]),
    policy=st.sampled_from([ARTICLE, DEFAULT]),
    headroom=st.sampled_from([0.0, 0.1]),
    host=st.sampled_from([None, 256.0]),
    engine=st.sampled_from(list(Engine)),
)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_never_recommends_what_the_calculator_says_does_not_fit(num_params, layout, hw, precision, optimizer, per_gpu,
                                                                policy, headroom, host, engine):
    gpus, nodes = layout
    if engine is not Engine.deepspeed:
        policy = DEFAULT  # the article's tree is DeepSpeed's (test_the_article_tree_is_deepspeeds)
    scn = on(engine, bare(num_params, gpus=gpus, nodes=nodes, hw=hw, precision=precision, optimizer=optimizer))
    policy = with_overrides(policy, {"min_headroom_fraction": headroom, "host_memory_gib_per_node": host}, "test")
    if engine is Engine.none and gpus > 1:  # one GPU without a wrapper: more is bad input, refused
        with pytest.raises(ZeroplanError, match="--engine none is one GPU"):
            advise(scn, policy, global_batch=per_gpu * gpus)
        return
    advice = advise(scn, policy, global_batch=per_gpu * gpus)
    rec = advice.recommendation
    if rec.fits:
        est = evaluate(recommended_scenario(advice), rec.stage)
        assert est.fits and est.total <= budget_bytes(est.usable_bytes, headroom)
        assert est.total == rec.plan.peak_bytes
        assert rec.micro_batch * rec.grad_accum * rec.gpus == per_gpu * gpus
    else:
        assert rec.stage is None and rec.plan is None
    for alt in advice.alternatives:
        assert alt.peak_bytes <= budget_bytes(alt.usable_bytes, headroom)
        assert alt.stage in supported_stages(engine)


# --- documentation ------------------------------------------------------------------------------------------

ALL_RULES = {
    "precision.fp16", "article.zero0-fits", "article.zero2-fits", "article.nvlink", "article.batch-512", "guard.fits",
    *FITS, "ckpt.unmodelled", "ckpt.selective", "ckpt.full", *OFFLOADS, "offload.unmodelled", "gpus.min",
    "overlap.comm", "batch.micro", "zero3.overhead",
    "advice.pcie-zero2", "correct.onebit-adam", "advice.embedding-heavy", "advice.long-sequence", "correct.grad-accum",
}


def test_every_rule_is_documented_with_its_source():
    doc = (Path(__file__).parent.parent / "docs" / "advisor.md").read_text()
    assert [rule for rule in sorted(ALL_RULES) if f"`{rule}`" not in doc] == []


def test_the_rule_ids_in_the_code_are_the_documented_ones():
    import re

    code = "".join((Path(__file__).parent.parent / "zeroplan" / name).read_text()
                   for name in ("advise/advisor.py", "advise/trees/article.py", "advise/trees/default.py", "advise/advisories.py"))
    prefixes = "article|guard|precision|fit|ckpt|offload|gpus|overlap|batch|zero3|advice|correct"
    literal = set(re.findall(rf'"((?:{prefixes})\.[a-z0-9-]+)"', code))
    built = {*FITS, "ckpt.selective", "ckpt.full"}  # f"fit.zero{stage}", f"ckpt.{level}"
    assert literal | built == ALL_RULES
