"""Reading ds_config mappings: stage, precision, batch, knobs, "auto", numbers, unknown and deprecated keys."""

import math

import pytest

from zeroplan.deepspeed.keys import (
    TOP_LEVEL_KEYS,
    ZERO_KEYS,
    find_deprecated_keys,
    find_unknown_keys,
)
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.deepspeed.removed import (
    REMOVED_TOP_LEVEL_KEYS,
    REMOVED_ZERO_KEYS,
    find_removed_keys,
)
from zeroplan.errors import SpecError
from zeroplan.jsonsource import scan_json_text
from zeroplan.memory.setup import (
    DS_REDUCE_BUCKET_SIZE,
    OffloadDevice,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.readers import parse_json

# The shape of the ZeRO-3 example in transformers' DeepSpeed docs.
HF_ZERO3 = {
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True},
        "overlap_comm": True,
        "contiguous_gradients": True,
        "sub_group_size": 1e9,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}


def test_hf_zero3_config_resolved_h4096():
    setup = TrainingSetup(micro_batch=2, grad_accum=4)
    config = parse_ds_config(HF_ZERO3, hidden_size=4096, setup=setup, dp_world=8)
    assert config.stage is ZeroStage.zero3
    assert config.precision is Precision.bf16_mixed
    assert (config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps) == (
        64, 2, 4)  # fmt: skip
    knobs = config.knobs
    assert (knobs.reduce_bucket_size, knobs.stage3_prefetch_bucket_size, knobs.stage3_param_persistence_threshold) == (
        16_777_216, 15_099_494, 40_960)  # fmt: skip
    assert knobs.sub_group_size == 1_000_000_000 and isinstance(knobs.sub_group_size, int)
    assert (knobs.offload_optimizer, knobs.offload_param) == (OffloadDevice.cpu, OffloadDevice.cpu)
    assert config.optimizer_type == "AdamW"
    assert {a.key for a in config.autos} == {
        "bf16.enabled", "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
        "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_param_persistence_threshold",
    }  # fmt: skip
    assert all(a.resolved for a in config.autos)
    assert config.unknown_keys == () and config.deprecated_keys == ()


def test_autos_unresolved_without_context():
    config = parse_ds_config(HF_ZERO3)
    assert config.train_batch_size is None and config.train_micro_batch_size_per_gpu is None
    assert config.knobs.reduce_bucket_size == DS_REDUCE_BUCKET_SIZE
    assert not config.bf16_enabled
    assert not any(a.resolved for a in config.autos)


def test_empty_config_is_deepspeed_defaults():
    config = parse_ds_config({})
    assert config.stage is ZeroStage.zero0
    assert config.precision is Precision.fp32  # no fp16/bf16 section: DeepSpeed trains in fp32
    assert config.knobs.overlap_comm is None and config.knobs.reduce_bucket_size == DS_REDUCE_BUCKET_SIZE
    assert config.effective_communication_data_type == "fp32"


@pytest.mark.parametrize(
    ("value", "expected"), [(5e8, 500_000_000), (500_000_000, 500_000_000), (2.0e8, 200_000_000), (1e30, int(1e30))]
)
def test_whole_valued_floats_accepted(value, expected):
    assert parse_ds_config({"zero_optimization": {"reduce_bucket_size": value}}).knobs.reduce_bucket_size == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "must be a whole number, got 1.5"),
        (15099494.4, "must be a whole number, got 15099494.4"),  # older transformers' float 0.9 h^2
        (-1, "must be >= 0, got -1"),
        (math.nan, "must be a finite number, got nan"),
        (math.inf, "must be a finite number, got inf"),
        (True, "expected a whole number, got true"),
        ("5e8", 'expected a number, got the string "5e8"'),
        ("big", 'expected a whole number, got "big"'),
        ([1], "expected a whole number, got [1]"),
    ],
    ids=["fraction", "hf-float", "negative", "nan", "inf", "bool", "numeric-string", "string", "list"],
)
def test_bad_numbers_name_the_key(value, reason):
    with pytest.raises(SpecError, match=r"^c\.json: zero_optimization\.stage3_max_live_parameters: ") as exc:
        parse_ds_config({"zero_optimization": {"stage3_max_live_parameters": value}}, origin="c.json")
    assert reason in str(exc.value)


@pytest.mark.parametrize("key", ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"])
def test_batch_values_must_be_positive(key):
    with pytest.raises(SpecError, match=f"{key}: must be >= 1, got 0"):
        parse_ds_config({key: 0})


def test_batch_floats_accepted():
    config = parse_ds_config({"train_batch_size": 64.0, "gradient_accumulation_steps": 2})
    assert (config.train_batch_size, config.gradient_accumulation_steps) == (64, 2)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"zero_optimization": {"stage": 4}}, "zero_optimization.stage: must be 0, 1, 2 or 3, got 4"),
        ({"zero_optimization": {"stage": "all"}}, 'zero_optimization.stage: expected a whole number, got "all"'),
        ({"zero_optimization": 3}, "zero_optimization: expected an object, got 3"),
        ({"fp16": {"enabled": "yes"}}, 'fp16.enabled: expected true or false, got "yes"'),
        ({"zero_optimization": {"overlap_comm": 1}}, "zero_optimization.overlap_comm: expected true or false, got 1"),
        ({"zero_optimization": {"offload_param": {"device": "gpu"}}}, 'offload_param.device: expected none, cpu or nvme'),
        ({"zero_optimization": {"offload_optimizer": {"ratio": 1.5}}}, "ratio: expected a number from 0 to 1, got 1.5"),
        ({"communication_data_type": "int8"}, "Invalid communication_data_type. Supported data types"),
        ({"data_types": {"grad_accum_dtype": "fp64"}}, 'grad_accum_dtype: expected fp32, fp16 or bf16, got "fp64"'),
        ({"optimizer": {"type": 3}}, "optimizer.type: expected a name, got 3"),
        ({"zero_optimization": {"reduce_bucket_size": 0}}, "reduce_bucket_size: must be >= 1, got 0"),  # gt=0 in 0.19.8
        ({"compile": {"deepcompile": "maybe"}}, "compile.deepcompile: Input should be a valid boolean"),
        ({"compile": {"passes": ["z9"]}}, "compile.passes.0: expected 'z1' or 'z3' or 'autosp' or 'autotp', got 'z9'"),
        ({"compile": {"free_activation_threshold": 1.5}}, "compile.free_activation_threshold: expected a whole number, got 1.5"),
    ],
)
def test_invalid_values(data, message):
    with pytest.raises(SpecError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_ds_config(data)


@pytest.mark.parametrize("data", [None, [], "text", 3])
def test_top_level_must_be_an_object(data):
    with pytest.raises(SpecError, match="expected a JSON object of DeepSpeed keys"):
        parse_ds_config(data, origin="x.json")


def test_unprefixed_aliases():
    zero = {"stage": 3, "prefetch_bucket_size": 1e7, "param_persistence_threshold": 1e4,
            "max_live_parameters": 3e8, "model_persistence_threshold": 1e6}  # fmt: skip
    knobs = parse_ds_config({"zero_optimization": zero}).knobs
    assert knobs.stage3_prefetch_bucket_size == 10_000_000
    assert knobs.stage3_param_persistence_threshold == 10_000
    assert knobs.stage3_max_live_parameters == 300_000_000
    assert knobs.stage3_model_persistence_threshold == 1_000_000


def test_zeropp_knobs_and_hpz_zero_means_off():
    zero = {"stage": 3, "zero_hpz_partition_size": 8, "zero_quantized_weights": True, "zero_quantized_gradients": True}
    knobs = parse_ds_config({"zero_optimization": zero}).knobs
    assert (knobs.zero_hpz_partition_size, knobs.zero_quantized_weights, knobs.zero_quantized_gradients) == (8, True, True)
    assert parse_ds_config({"zero_optimization": {"zero_hpz_partition_size": 0}}).knobs.zero_hpz_partition_size == 1


def test_offload_ratio_and_nvme():
    zero = {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "ratio": 0.3}}
    config = parse_ds_config({"zero_optimization": zero})
    assert (config.knobs.offload_optimizer, config.offload_optimizer_ratio) == (OffloadDevice.nvme, 0.3)


def test_offload_null_section_is_none():
    config = parse_ds_config({"zero_optimization": {"offload_optimizer": None}})
    assert config.knobs.offload_optimizer is OffloadDevice.none


@pytest.mark.parametrize(
    ("data", "precision"),
    [
        ({"fp16": {"enabled": True}}, Precision.fp16_mixed),
        ({"bf16": {"enabled": True}}, Precision.bf16_mixed),
        ({"bfloat16": {"enabled": True}}, Precision.bf16_mixed),
        ({"bf16": {"enabled": False}, "bfloat16": {"enabled": True}}, Precision.fp32),  # bf16 wins, as in DeepSpeed
        ({"bf16": None, "bfloat16": {"enabled": True}}, Precision.bf16_mixed),  # a null bf16 falls back
        ({"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}},
         Precision.bf16_true),
        ({"fp16": {"enabled": False}}, Precision.fp32),
    ],
    ids=["fp16", "bf16", "bfloat16-alias", "bf16-over-alias", "null-bf16", "pure-bf16", "fp32"],
)  # fmt: skip
def test_precision(data, precision):
    assert parse_ds_config(data).precision is precision


def test_dtypes():
    config = parse_ds_config({"bf16": {"enabled": True}, "communication_data_type": "FP32",
                              "data_types": {"grad_accum_dtype": "torch.float32"}})  # fmt: skip
    assert (config.communication_data_type, config.grad_accum_dtype) == ("fp32", "fp32")
    assert config.setup_fields() == {"precision": Precision.bf16_mixed, "fp32_grad_accum": True}
    default = parse_ds_config({"fp16": {"enabled": True}})
    assert (default.effective_communication_data_type, default.effective_grad_accum_dtype) == ("fp16", "fp16")


def test_setup_fields_leave_out_unresolved_precision():
    assert "precision" not in parse_ds_config({"bf16": {"enabled": "auto"}}).setup_fields()
    resolved = parse_ds_config({"bf16": {"enabled": "auto"}}, setup=TrainingSetup(precision=Precision.bf16_mixed))
    assert resolved.setup_fields()["precision"] is Precision.bf16_mixed


def test_setup_fields_pin_batch():
    config = parse_ds_config({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8})
    assert config.setup_fields() == {"precision": Precision.fp32, "micro_batch": 4, "grad_accum": 8,
                                     "fp32_grad_accum": False}  # fmt: skip


def test_legacy_boolean_zero_is_stage1_with_allgather_size():
    config = parse_ds_config({"zero_optimization": True, "allgather_size": 2e8})
    assert config.stage is ZeroStage.zero1
    assert config.knobs.allgather_bucket_size == 200_000_000
    assert [d.key for d in config.deprecated_keys] == ["zero_optimization", "allgather_size"]
    assert parse_ds_config({"zero_optimization": False}).stage is ZeroStage.zero0


def test_deprecated_cpu_offload_maps_to_cpu():
    config = parse_ds_config({"zero_optimization": {"stage": 2, "cpu_offload": True}})
    assert config.knobs.offload_optimizer is OffloadDevice.cpu
    (deprecated,) = config.deprecated_keys
    assert (deprecated.replacement, deprecated.conflict) == ("zero_optimization.offload_optimizer", False)


def test_stage_auto_falls_back_to_deepspeed_default():
    config = parse_ds_config({"zero_optimization": {"stage": "auto", "overlap_comm": "auto"}})
    assert config.stage is ZeroStage.zero0
    assert [(a.key, a.value, a.resolved) for a in config.autos] == [
        ("zero_optimization.stage", 0, False), ("zero_optimization.overlap_comm", None, False)]  # fmt: skip


def test_source_facts_carried():
    text = '{\n  // planned\n  "zero_optimization": {\n    "stage": 2\n  },\n  "zero_optimization": {"stage": 3}\n}'
    source = scan_json_text(text)
    config = parse_ds_config(parse_json(source.text, "c.json"), origin="c.json", source=source)
    assert config.has_comments
    assert config.duplicate_keys == (("zero_optimization", 6),)
    assert config.line_of("zero_optimization.stage") == 4
    assert config.stage is ZeroStage.zero3  # json keeps the last duplicate


# --- unknown and deprecated keys (dskeys) -------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key", "suggestion", "forbidden"),
    [
        ({"train_micro_batch_size": 4}, "train_micro_batch_size", "train_micro_batch_size_per_gpu", False),
        ({"gradient_accumulation_step": 4}, "gradient_accumulation_step", "gradient_accumulation_steps", False),
        ({"stage3_max_live_parameters": 1}, "stage3_max_live_parameters", "zero_optimization.stage3_max_live_parameters",
         False),
        ({"zero_optimization": {"stage3_max_live_params": 1}}, "zero_optimization.stage3_max_live_params",
         "zero_optimization.stage3_max_live_parameters", True),
        ({"zero_optimization": {"train_batch_size": 8}}, "zero_optimization.train_batch_size", "train_batch_size", True),
        ({"zero_optimization": {"offload_optimizer": {"devise": "cpu"}}}, "zero_optimization.offload_optimizer.devise",
         "zero_optimization.offload_optimizer.device", True),
        ({"fp16": {"enable": True}}, "fp16.enable", "fp16.enabled", True),
        ({"zero_optimization": {"grad_hooks": True}}, "zero_optimization.grad_hooks", None, True),  # in the docs only
        ({"my_launcher_note": "x"}, "my_launcher_note", None, False),
    ],
)  # fmt: skip
def test_unknown_keys_with_did_you_mean(data, key, suggestion, forbidden):
    (unknown,) = find_unknown_keys(data)
    assert (unknown.key, unknown.suggestion, unknown.forbidden) == (key, suggestion, forbidden)


def test_known_keys_are_not_reported():
    data = {key: {} for key in TOP_LEVEL_KEYS} | {"zero_optimization": dict.fromkeys(ZERO_KEYS, 1)}
    assert find_unknown_keys(data) == ()


@pytest.mark.parametrize("key", ["_comment", "_note", "comments", "my_comment"])
def test_a_comment_key_gets_no_did_you_mean(key):
    (unknown,) = find_unknown_keys({key: "LLaMA-Factory writes one"})  # "_comment" once suggested comet
    assert (unknown.suggestion, unknown.message) == (None, f"unknown top-level key {key}: DeepSpeed ignores it silently")


def test_vocabulary_is_deepspeed_0_19_8s():
    # runtime/zero/config.py gained compute_grad_norm and parameter_alignment; runtime/config.py disable_python_gc.
    assert {"compute_grad_norm", "parameter_alignment"} <= ZERO_KEYS and "disable_python_gc" in TOP_LEVEL_KEYS
    assert not (set(REMOVED_TOP_LEVEL_KEYS) & TOP_LEVEL_KEYS) and not (set(REMOVED_ZERO_KEYS) & ZERO_KEYS)


def test_removed_blocks_are_refusals_not_unknown_keys():
    data = {key: {} for key in REMOVED_TOP_LEVEL_KEYS} | {"zero_optimization": dict.fromkeys(REMOVED_ZERO_KEYS, 1)}
    assert find_unknown_keys(data) == ()
    found = find_removed_keys(data)
    assert [r.key for r in found] == [*REMOVED_TOP_LEVEL_KEYS, *(f"zero_optimization.{k}" for k in REMOVED_ZERO_KEYS)]
    (sparse,) = find_removed_keys({"sparse_attention": {"mode": "fixed"}})
    assert "DeepSpeed Sparse Attention has been removed" in sparse.message and "issues/8489" in sparse.message
    assert parse_ds_config({"amp": {"enabled": False}}).removed_keys[0].key == "amp"  # present is enough


def test_zero_sizes_that_deepspeed_accepts():
    # sub_group_size and allgather_bucket_size are ge=0 in DeepSpeed; axolotl's ZeRO-3 configs set sub_group_size 0.
    config = parse_ds_config({"bf16": {"enabled": True}, "zero_optimization": {"stage": 3, "sub_group_size": 0}})
    assert config.knobs.sub_group_size == 0
    assert parse_ds_config({"zero_optimization": {"allgather_bucket_size": 0}}).knobs.allgather_bucket_size == 0
    assert config.knob_keys == {"sub_group_size": "sub_group_size"}


def test_compile_block_read_as_deepspeed_reads_it():
    autosp = parse_ds_config({"compile": {"deepcompile": True, "passes": ["autosp"], "debug_log": "auto"}})
    assert autosp.unknown_keys == ()
    axolotl = parse_ds_config({"compile": {"disable": False, "backend": "inductor"}})  # the pre-0.15 schema had neither
    assert [(u.key, u.forbidden) for u in axolotl.unknown_keys] == [("compile.disable", True), ("compile.backend", True)]


def test_unknown_zero_key_with_auto_is_marked():
    (unknown,) = find_unknown_keys({"zero_optimization": {"reduce_bucket": "auto"}})
    assert unknown.value_is_auto


@pytest.mark.parametrize(
    ("zero", "key", "replacement", "conflict"),
    [
        ({"cpu_offload": True}, "cpu_offload", "offload_optimizer", False),
        ({"cpu_offload": False, "offload_optimizer": {"device": "cpu"}}, "cpu_offload", "offload_optimizer", True),
        ({"cpu_offload_param": True}, "cpu_offload_param", "offload_param", False),
        ({"cpu_offload_use_pin_memory": True}, "cpu_offload_use_pin_memory",
         "offload_optimizer.pin_memory / offload_param.pin_memory", False),
        ({"stage3_gather_fp16_weights_on_model_save": True}, "stage3_gather_fp16_weights_on_model_save",
         "stage3_gather_16bit_weights_on_model_save", False),
        ({"stage3_gather_fp16_weights_on_model_save": True, "gather_16bit_weights_on_model_save": True},
         "stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", True),
        ({"stage": 3, "elastic_checkpoint": True}, "elastic_checkpoint",
         "Universal Checkpointing (checkpoint.load_universal)", False),
    ],
)  # fmt: skip
def test_deprecated_zero_keys(zero, key, replacement, conflict):
    (deprecated,) = find_deprecated_keys({"zero_optimization": zero})
    assert deprecated.key == f"zero_optimization.{key}"
    assert deprecated.replacement.removeprefix("zero_optimization.") == replacement
    assert deprecated.conflict is conflict


def test_bfloat16_section_deprecated():
    (alone,) = find_deprecated_keys({"bfloat16": {"enabled": True}})
    assert (alone.replacement, alone.note) == ("bf16", None)
    (both,) = find_deprecated_keys({"bfloat16": {}, "bf16": {}})
    assert "ignores this section" in both.note


def test_elastic_checkpoint_below_stage3_is_not_deprecated():
    assert find_deprecated_keys({"zero_optimization": {"stage": 2, "elastic_checkpoint": True}}) == ()


def test_setup_fields_with_dp_world_take_the_batch_deepspeed_derives():
    only_total = parse_ds_config({"train_batch_size": 64, "gradient_accumulation_steps": 2})
    assert only_total.setup_fields(8)["micro_batch"] == 4 and only_total.setup_fields(8)["grad_accum"] == 2
    assert "micro_batch" not in only_total.setup_fields()  # no world: only what the file states
    assert "micro_batch" not in parse_ds_config({"train_batch_size": 4}).setup_fields(8)  # floors to 0


def test_batch_waits_for_open_autos():
    config = parse_ds_config({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2})
    assert config.batch(8) is None
    resolved = parse_ds_config({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2},
                               setup=TrainingSetup(micro_batch=2, grad_accum=3), dp_world=8)  # fmt: skip
    assert (resolved.batch(8).train_batch, resolved.batch(8).grad_acc) == (48, 3)
