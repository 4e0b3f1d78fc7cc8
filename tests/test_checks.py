"""CI rules over the DeepSpeed config: each fires on a bad config and stays quiet on a good one; the registry."""

import re
from pathlib import Path

import pytest

from zeroplan.check.findings import Finding, Rule, RunContext
from zeroplan.check.rules import (
    RULES,
    RULES_BY_ID,
    check_rule_ids,
    count_by_severity,
    failed,
    run_checks,
)
from zeroplan.deepspeed.batch import derive_batch
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.jsonsource import scan_json_text
from zeroplan.memory.setup import Parallelism, TrainingSetup
from zeroplan.readers import parse_json

V100 = load_hardware("v100-sxm-32gb")
H100 = load_hardware("h100-sxm-80gb")
RUN8 = RunContext(parallelism=Parallelism(gpus=8), hardware=H100)
GOOD = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"},
                                                              "offload_param": {"device": "cpu"}}}  # fmt: skip


def findings(data, run=RUN8, **parse):
    return run_checks(parse_ds_config(data, origin="ds.json", **parse), run)


def fired(data, rule, run=RUN8, **parse):
    return [f for f in findings(data, run, **parse) if f.rule == rule]


def test_good_config_is_clean():
    assert findings(GOOD) == ()


# --- batch-identity ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ({"train_batch_size": 1000, "train_micro_batch_size_per_gpu": 3},
         "1000 != 3 * 41 * 8 (world_size = data-parallel size); gradient_accumulation_steps = 1000 / (3 * 8) = 41.67 "
         "is not a whole number and DeepSpeed floors it to 41"),
        ({"train_batch_size": 100, "gradient_accumulation_steps": 4},
         "100 != 3 * 4 * 8 (world_size = data-parallel size); train_micro_batch_size_per_gpu = 100 / (8 * 4) = 3.125 "
         "is not a whole number and DeepSpeed floors it to 3"),
        ({"train_batch_size": 60},
         "60 != 7 * 1 * 8 (world_size = data-parallel size); train_micro_batch_size_per_gpu = 60 / (8 * 1) = 7.5"),
        ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4},
         "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 64 != 4 * 4 * 8"),
        ({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1},
         "Gradient accumulation steps: 0 has to be greater than 0 (DeepSpeed asserts); gradient_accumulation_steps = "
         "4 / (1 * 8) = 0.5"),
        ({"gradient_accumulation_steps": 4},
         "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"),
    ],
    ids=["derived-gas", "derived-micro", "only-total", "all-three", "derived-zero", "none"],
)  # fmt: skip
def test_batch_identity_fires(batch, expected):
    (finding,) = fired(batch, "batch-identity")
    assert finding.severity == "error"
    assert expected in finding.message
    assert finding.key in ("train_batch_size", "train_micro_batch_size_per_gpu")


@pytest.mark.parametrize(
    "batch",
    [
        {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2},
        {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4},
        {"train_batch_size": 64, "gradient_accumulation_steps": 2},
        {"train_batch_size": 64},
        {"train_micro_batch_size_per_gpu": 3},
        {"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5},
    ],
)
def test_batch_identity_quiet(batch):
    assert fired(batch, "batch-identity") == []


def test_batch_identity_uses_dp_world_and_skips_without_it():
    batch = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    assert fired(batch, "batch-identity", RunContext(parallelism=Parallelism(gpus=16, nodes=2)))
    assert fired(batch, "batch-identity", RunContext()) == []


def test_batch_autos_resolved_from_setup_satisfy_identity():
    data = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}
    assert fired(data, "batch-identity", setup=TrainingSetup(micro_batch=2, grad_accum=3), dp_world=8) == []


def test_derive_batch_matches_deepspeed_floor_division():
    assert derive_batch(1000, 3, None, 8).grad_acc == 41
    assert derive_batch(None, 3, None, 8).train_batch == 24
    assert derive_batch(None, None, 4, 8) is None


# --- precision ------------------------------------------------------------------------------------


def test_precision_conflict():
    (finding,) = fired({**GOOD, "fp16": {"enabled": True}}, "precision-conflict")
    assert "'bfloat16 and fp16 modes cannot be simultaneously enabled'" in finding.message
    assert finding.key == "bf16.enabled"
    assert fired({**GOOD, "fp16": {"enabled": False}}, "precision-conflict") == []


def test_bf16_unsupported_on_v100():
    run = RunContext(parallelism=Parallelism(gpus=8), hardware=V100)
    (finding,) = fired(GOOD, "bf16-unsupported", run)
    assert "v100-sxm-32gb has no bf16 support" in finding.message
    fp16 = {k: v for k, v in GOOD.items() if k != "bf16"} | {"fp16": {"enabled": True}}
    assert fired(fp16, "bf16-unsupported", run) == []
    assert fired(GOOD, "bf16-unsupported") == []  # H100


# --- 1-bit optimizers -------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "name"), [("OneBitAdam", "1bit-Adam"), ("ZeroOneAdam", "0/1 Adam"),
                                            ("onebitlamb", "1bit-Lamb")])  # fmt: skip
def test_onebit_with_zero(kind, name):
    data = {**GOOD, "optimizer": {"type": kind}, "zero_optimization": {"stage": 1}}
    (finding,) = fired(data, "onebit-zero")
    assert f"'{name} is not compatible with ZeRO'" in finding.message and "ZeRO++" in finding.message
    assert fired({**data, "zero_optimization": {"stage": 0}}, "onebit-zero") == []


def test_onebit_quiet_for_adamw():
    assert fired({**GOOD, "zero_optimization": {"stage": 2}}, "onebit-zero") == []


# --- offload ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zero", "expected"),
    [
        ({"stage": 2, "offload_param": {"device": "cpu"}}, "offload_param device cpu needs ZeRO stage 3, got stage 2"),
        ({"stage": 1, "cpu_offload_param": True}, "offload_param device cpu needs ZeRO stage 3, got stage 1"),
        ({"stage": 2, "offload_optimizer": {"device": "nvme"}}, "offload_optimizer device nvme needs ZeRO stage 3"),
        ({"stage": 0, "offload_optimizer": {"device": "cpu"}}, "needs ZeRO stage 1, 2 or 3, got stage 0"),
    ],
    ids=["param-stage2", "deprecated-param", "nvme-stage2", "optimizer-stage0"],
)
def test_offload_stage_fires(zero, expected):
    (finding,) = fired({**GOOD, "zero_optimization": zero}, "offload-stage")
    assert expected in finding.message


@pytest.mark.parametrize(
    "zero",
    [{"stage": 2, "offload_optimizer": {"device": "cpu"}}, {"stage": 1, "offload_optimizer": {"device": "cpu"}},
     {"stage": 3, "offload_optimizer": {"device": "nvme"}, "offload_param": {"device": "nvme"}},
     {"stage": 2, "offload_param": {"device": "none"}}],
)  # fmt: skip
def test_offload_stage_quiet(zero):
    assert fired({**GOOD, "zero_optimization": zero}, "offload-stage") == []


def test_offload_ratio():
    zero = {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}
    (finding,) = fired({**GOOD, "zero_optimization": zero}, "offload-ratio")
    assert "ratio 0.3 with ZeRO stage 2" in finding.message
    assert "'Partial offloading only supported for ZeRO Stage 3.'" in finding.message
    assert fired({**GOOD, "zero_optimization": {**zero, "stage": 3}}, "offload-ratio") == []
    assert fired({**GOOD, "zero_optimization": {**zero, "offload_optimizer": {"device": "cpu"}}}, "offload-ratio") == []


# --- keys -------------------------------------------------------------------------------------------


def test_unknown_zero_key_is_an_error_with_suggestion():
    data = {**GOOD, "zero_optimization": {"stage": 3, "stage3_max_live_params": 1e9}}
    (finding,) = fired(data, "unknown-key")
    assert finding.severity == "error"
    assert finding.message.endswith("did you mean zero_optimization.stage3_max_live_parameters?")
    assert fired(GOOD, "unknown-key") == []


def test_unknown_zero_key_with_auto_only_warns():
    (finding,) = fired({**GOOD, "zero_optimization": {"stage": 3, "reduce_bucket": "auto"}}, "unknown-key")
    assert finding.severity == "warning" and "drops \"auto\"" in finding.message


def test_unknown_top_key_is_a_warning():
    (finding,) = fired({**GOOD, "train_micro_batch_size": 4}, "unknown-top-key")
    assert finding.severity == "warning"
    assert "DeepSpeed ignores it silently; did you mean train_micro_batch_size_per_gpu?" in finding.message
    assert fired(GOOD, "unknown-top-key") == []


def test_deprecated_key_warns_with_replacement():
    (finding,) = fired({**GOOD, "bfloat16": GOOD["bf16"], "bf16": None}, "deprecated-key")
    assert finding.message == "bfloat16 is deprecated; use bf16"
    assert fired(GOOD, "deprecated-key") == []


def test_deprecated_conflict_is_an_error():
    zero = {"stage": 2, "cpu_offload": True, "offload_optimizer": {"device": "cpu"}}
    (finding,) = fired({**GOOD, "zero_optimization": zero}, "deprecated-conflict")
    assert finding.severity == "error" and "Cannot provide deprecated parameter" in finding.message
    assert fired({**GOOD, "zero_optimization": {"stage": 2, "cpu_offload": True}}, "deprecated-conflict") == []


def _from_text(text, run=RUN8):
    source = scan_json_text(text)
    return run_checks(parse_ds_config(parse_json(source.text, "ds.json"), origin="ds.json", source=source), run)


def test_duplicate_key():
    text = '{\n"train_micro_batch_size_per_gpu": 1,\n"train_micro_batch_size_per_gpu": 2\n}'
    (finding,) = [f for f in _from_text(text) if f.rule == "duplicate-key"]
    assert (finding.severity, finding.line, finding.key) == ("error", 3, "train_micro_batch_size_per_gpu")
    assert "first on line 2" in finding.message
    assert [f for f in _from_text('{"train_micro_batch_size_per_gpu": 1}') if f.rule == "duplicate-key"] == []


def test_auto_values_reported_with_assumed_value():
    data = {**GOOD, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}
    (finding,) = fired(data, "auto-value", hidden_size=4096)
    assert finding.severity == "info"
    assert finding.message == ('zero_optimization.reduce_bucket_size is "auto", resolved: assumed 16777216 '
                               "(transformers: hidden_size^2 = 4096^2)")  # fmt: skip
    (unresolved,) = fired(data, "auto-value")
    assert "not resolved: assumed 500000000" in unresolved.message
    assert fired(GOOD, "auto-value") == []


def test_json_comments():
    text = '{\n  // tuned on 2 nodes\n  "train_micro_batch_size_per_gpu": 4\n}'
    (finding,) = [f for f in _from_text(text) if f.rule == "json-comments"]
    assert finding.severity == "info" and "hjson" in finding.message
    hf = '{\n  // for the Trainer\n  "train_micro_batch_size_per_gpu": "auto"\n}'
    (warning,) = [f for f in _from_text(hf) if f.rule == "json-comments"]
    assert warning.severity == "warning"
    assert [f for f in _from_text('{"train_micro_batch_size_per_gpu": 4}') if f.rule == "json-comments"] == []


# --- runner and registry ------------------------------------------------------------------------------


def test_findings_carry_file_and_line():
    text = '{\n  "train_micro_batch_size_per_gpu": 4,\n  "zero_optimization": {\n    "stage": 2,\n' \
           '    "offload_param": {"device": "cpu"}\n  }\n}'  # fmt: skip
    (finding,) = _from_text(text)
    assert (finding.rule, finding.file, finding.key, finding.line) == (
        "offload-stage", "ds.json", "zero_optimization.offload_param.device", 5)  # fmt: skip


def test_ignore_skips_a_rule_and_rejects_unknown_ids():
    data = {**GOOD, "train_micro_batch_size": 4}
    assert run_checks(parse_ds_config(data), RUN8, ignore=["unknown-top-key"]) == ()
    with pytest.raises(ZeroplanError, match="unknown rule 'unknown-top-keys'; did you mean unknown-top-key"):
        check_rule_ids(["unknown-top-keys"])


def test_rules_needing_evidence_run_only_with_it():
    def check_fits(config, run, *, memory):
        yield Finding(rule="does-not-fit", severity="error", message=f"needs {memory} GiB")

    rule = Rule("does-not-fit", "error", "does not fit", "test", check_fits, needs=("memory",))
    config = parse_ds_config(GOOD)
    assert run_checks(config, RUN8, rules=[rule]) == ()
    (finding,) = run_checks(config, RUN8, rules=[rule], evidence={"memory": 90})
    assert (finding.message, finding.file) == ("needs 90 GiB", "ds_config.json")


def test_failed_and_counts():
    warning = Finding(rule="r", severity="warning", message="m")
    error = Finding(rule="r", severity="error", message="m")
    assert not failed([warning]) and failed([warning], strict=True) and failed([error])
    assert count_by_severity([warning, error, error]) == {"error": 2, "warning": 1, "info": 0}


# Configs that make every registered rule fire, for the registry-wide checks below.
EVERY_RULE = (
    '{\n  // c\n  "train_batch_size": 10, "train_micro_batch_size_per_gpu": 3, "stage3_max_live_parameters": 1,\n'
    '  "bf16": {"enabled": true}, "fp16": {"enabled": true}, "bfloat16": {"enabled": true},\n'
    '  "optimizer": {"type": "OneBitAdam"}, "train_batch_size": 10, "amp": {"enabled": true},\n'
    '  "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "cpu_offload": true, "stage3_max_live_params": 1,\n'
    '    "offload_optimizer": {"device": "cpu", "ratio": 0.5}, "offload_param": {"device": "cpu"}},\n'
    '  "pipeline": {"stages": 2}\n}'
)


def test_every_rule_has_a_firing_config_and_keeps_its_id_and_severity():
    run = RunContext(parallelism=Parallelism(gpus=8), hardware=V100)
    found = _from_text(EVERY_RULE, run)
    assert {f.rule for f in found} == {rule.id for rule in RULES if not rule.needs}  # the others: test_checks_*.py
    for finding in found:
        assert finding.severity == RULES_BY_ID[finding.rule].severity or finding.rule == "json-comments"


def test_registry_ids_unique_and_stable():
    ids = [rule.id for rule in RULES]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)
    assert all(rule.summary and rule.source and rule.severity in ("error", "warning", "info") for rule in RULES)


def test_rule_sources_cite_public_or_in_repo_sources():
    assert RULES_BY_ID["zero3-slow-fabric"].source == (
        "ZeRO paper §7 (3 Psi per step); ZeRO++ arXiv:2306.10209 (hpZ); "
        "deepspeedai/DeepSpeed@edaa7221:docs/_posts/2021-03-08-zero3-offload.md")
    assert RULES_BY_ID["low-headroom"].source == (
        "zeroplan/memory/stage.py estimate_stage (docs/formulas.md); docs/hardware.md (fragmentation)")


def test_docs_table_lists_every_rule():
    docs = (Path(__file__).parent.parent / "docs" / "checks.md").read_text(encoding="utf-8")
    table_ids = re.findall(r"^\| `([a-z0-9-]+)` \| (error|warning|info) \|", docs, re.M)
    assert dict(table_ids) == {rule.id: rule.severity for rule in RULES}
