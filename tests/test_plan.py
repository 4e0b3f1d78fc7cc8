"""Plans: the pure model (validation, batch derivation, topology, conflicts) and the loader (files, presets, DeepSpeed config)."""

import json

import pytest
from pydantic import ValidationError

from zeroplan.check.merge import merge_setup
from zeroplan.check.plan import Plan
from zeroplan.check.planfiles import load_plan
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.errors import SpecError, ZeroplanError
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import Attention, OffloadDevice, Precision, ZeroStage
from zeroplan.readers import yaml_key_lines
from zeroplan.registry import bundled_config_dir

BASE = {"params": 7_000_000_000, "hardware": "h100-sxm-80gb", "gpus": 8, "deepspeed": "ds.json"}


def plan(**changes) -> Plan:
    return Plan.model_validate({**BASE, **changes})


def test_minimal_plan_takes_defaults():
    p = plan()
    assert (p.nodes, p.batch()) == (None, (1, 1))  # nodes: the fewest the hardware needs (spread_gpus)
    assert p.parallelism(8, "h100").nodes == 1 and p.parallelism(4, "l4").nodes == 2
    assert p.setup().precision is Precision.bf16_mixed and p.setup().attention is Attention.flash
    assert p.ignore == () and p.min_headroom_pct is None


@pytest.mark.parametrize("written", ["9e9", 9e9, 9_000_000_000, "9_000_000_000"])
def test_counts_read_like_the_params_option(written):
    # YAML 1.1 reads 9e9 as a string: a plan accepts it as --params does.
    assert plan(params=written).params == 9_000_000_000


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"model": "gemma2-9b"}, "give either model (a preset or file) or params (a count), not both"),
        ({"params": None}, "give either model"),
        ({"params": True}, "expected a whole number, got true"),
        ({"params": "1.5"}, "'1.5' is not a whole number"),
        ({"params": "lots"}, "'lots' is not a number"),
        ({"gpus": 0}, "greater than 0"),
        ({"gpus": 12, "nodes": 5}, "gpus (12) is not a multiple of nodes (5)"),
        ({"topology": "multinode", "nodes": 1}, "topology multinode needs nodes > 1"),
        ({"largest_layer": 8e9}, "largest_layer (8,000,000,000) is larger than params (7,000,000,000)"),
        ({"training": {"train_batch_size": 100}}, "train_batch_size (100) is not a whole multiple of "
         "train_micro_batch_size_per_gpu x gpus (1 x 8 = 8)"),
        ({"training": {"train_batch_size": 64, "gradient_accumulation_steps": 4, "train_micro_batch_size_per_gpu": 1}},
         "train_batch_size (64) != train_micro_batch_size_per_gpu (1) x gradient_accumulation_steps (4) x gpus (8) = 32"),
        ({"training": {"train_batch_size": 512, "gradient_accumulation_steps": 3}},
         "train_batch_size (512) is not a whole multiple of gradient_accumulation_steps x gpus (3 x 8 = 24)"),
        ({"training": {"attn_implementation": "flash"}}, "attn_implementation"),
        ({"training": {"seq_length": 4096}}, "seq_length"),
        ({"hardwre": "h100-sxm-80gb"}, "hardwre"),
        ({"deepspeed": None}, "deepspeed"),
    ],
)  # fmt: skip
def test_invalid_plans_name_the_problem(changes, needle):
    with pytest.raises(ValidationError) as info:
        plan(**changes)
    assert needle in str(info.value)


def test_global_batch_derives_accumulation_or_micro_batch():
    p = plan(training={"train_batch_size": 512, "train_micro_batch_size_per_gpu": 2})
    assert (p.batch(), p.setup().micro_batch, p.setup().grad_accum) == ((2, 32), 2, 32)
    assert plan(training={"train_batch_size": 512, "gradient_accumulation_steps": 32}).batch() == (2, 32)
    assert plan(training={"train_batch_size": 512}).batch() == (1, 64)
    assert plan(training={"train_batch_size": 512}).batch(open_micro=4) == (4, 16)  # the config's micro-batch
    both = plan(training={"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 32, "train_batch_size": 512})
    assert both.batch(open_micro=8, open_gas=1) == (2, 32)


@pytest.mark.parametrize(("impl", "attention"), [("eager", Attention.eager), ("sdpa", Attention.flash),
                                                 ("flash_attention_2", Attention.flash)])  # fmt: skip
def test_attn_implementation_uses_hugging_face_names(impl, attention):
    assert plan(training={"attn_implementation": impl}).setup().attention is attention


@pytest.mark.parametrize(
    ("changes", "fabric", "topology"),
    [({}, "nvlink", Topology.nvlink), ({}, "xgmi", Topology.nvlink), ({}, "pcie", Topology.pcie),
     ({"topology": "pcie"}, "nvlink", Topology.pcie), ({"gpus": 16, "nodes": 2}, "pcie", Topology.multinode),
     ({"gpus": 16, "nodes": 2, "topology": "multinode"}, "nvlink", Topology.multinode)],
)  # fmt: skip
def test_topology(changes, fabric, topology):
    p = plan(**changes)
    assert p.topology_for(p.parallelism(8, "h100").nodes, fabric) is topology


def test_a_multinode_plan_whose_gpus_fit_one_node_is_refused():
    with pytest.raises(ZeroplanError, match=r"topology multinode needs nodes > 1 \(8 GPUs fit one h100 node\)"):
        plan(topology="multinode").parallelism(8, "h100")


# --- conflicts with the DeepSpeed config --------------------------------------------------------------


def merged(p, data):
    return merge_setup(p, parse_ds_config(data, origin="ds.json"))


def test_conflicts_name_both_values():
    p = plan(training={"train_micro_batch_size_per_gpu": 2, "train_batch_size": 512, "precision": "bf16-true"})
    _, problems = merged(p, {"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True}})
    assert problems == [
        "training.train_micro_batch_size_per_gpu is 2 but ds.json gives 4",
        "training.gradient_accumulation_steps is 32 (derived) but ds.json gives 1 (derived by DeepSpeed)",
        "training.train_batch_size is 512 but ds.json gives 32 (derived by DeepSpeed)",
        "training.precision is bf16-true but ds.json makes DeepSpeed run bf16-mixed",
    ]


def test_open_values_come_from_the_config_and_autos_from_the_plan():
    p = plan(training={"train_micro_batch_size_per_gpu": 2, "precision": "fp16-mixed"})
    setup, problems = merged(p, {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
                                 "gradient_accumulation_steps": 4, "fp16": {"enabled": "auto"}})  # fmt: skip
    assert problems == [] and (setup.micro_batch, setup.grad_accum, setup.precision) == (2, 4, Precision.fp16_mixed)
    setup, problems = merged(plan(), {"train_batch_size": 64, "gradient_accumulation_steps": 2, "bf16": {"enabled": True}})
    assert problems == [] and (setup.micro_batch, setup.grad_accum, setup.precision) == (4, 2, Precision.bf16_mixed)
    setup, problems = merged(plan(training={"gradient_accumulation_steps": 4}), {"train_micro_batch_size_per_gpu": 2,
                                                                               "gradient_accumulation_steps": "auto"})
    assert problems == [] and (setup.micro_batch, setup.grad_accum) == (2, 4)


def test_deepspeed_derives_what_the_config_leaves_out():
    # Only the micro-batch given: DeepSpeed runs accumulation 1, whatever the plan meant.
    _, problems = merged(plan(training={"gradient_accumulation_steps": 4}), {"train_micro_batch_size_per_gpu": 2})
    assert problems == ["training.gradient_accumulation_steps is 4 but ds.json gives 1 (derived by DeepSpeed)",
                        "training.train_batch_size is 64 (derived) but ds.json gives 16 (derived by DeepSpeed)"]


def test_global_batch_the_configs_micro_batch_cannot_reach():
    _, problems = merged(plan(training={"train_batch_size": 512}), {"train_micro_batch_size_per_gpu": 3, "train_batch_size": "auto"})
    assert problems == ["training.train_batch_size (512) is not a whole multiple of train_micro_batch_size_per_gpu x gpus "
                        "(3 x 8, the micro-batch ds.json gives)"]  # fmt: skip


def test_a_plan_default_disagreeing_with_the_config_is_named_as_such():
    _, problems = merged(plan(training={"train_batch_size": 64}), {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2})
    assert problems == ["training.gradient_accumulation_steps is 1 (derived) but ds.json gives 2",
                        "training.train_batch_size is 64 but ds.json gives 128 (derived by DeepSpeed)"]  # fmt: skip


# --- loading files ---------------------------------------------------------------------------------------


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_load_plan_reads_the_config_relative_to_the_plan(tmp_path):
    write(tmp_path / "plans" / "ds" / "z3.json", json.dumps({
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}, indent=1))  # fmt: skip
    path = write(tmp_path / "plans" / "p.yaml", "params: 7e9\nhardware: h100-sxm-80gb\ngpus: 16\nnodes: 2\n"
                 "training:\n  train_micro_batch_size_per_gpu: 2\n  train_batch_size: 256\ndeepspeed: ds/z3.json\n")  # fmt: skip
    run = load_plan(path)
    assert run.config.origin == str(tmp_path / "plans" / "ds" / "z3.json")
    assert run.config.stage is ZeroStage.zero3 and run.topology is Topology.multinode
    assert (run.scenario.setup.micro_batch, run.scenario.setup.grad_accum, run.config.train_batch_size) == (2, 8, 256)
    assert run.scenario.knobs.offload_optimizer is OffloadDevice.cpu
    assert run.scenario.hardware.name == "h100-sxm-80gb" and run.scenario.parallelism.gpus_per_node == 8
    assert run.context.dp_world == 16


def test_inline_block_gets_plan_lines(tmp_path):
    path = write(tmp_path / "p.yaml", "params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed:\n"
                 "  train_micro_batch_size_per_gpu: 1\n  zero_optimization:\n    stage: 2\n")  # fmt: skip
    run = load_plan(path)
    assert run.config.origin == str(path)
    assert run.config.line_of("zero_optimization.stage") == 7


def test_unstated_setup_comes_from_the_config(tmp_path):
    ds = {"train_batch_size": 64, "gradient_accumulation_steps": 2, "fp16": {"enabled": True},
          "data_types": {"grad_accum_dtype": "fp32"}}  # fmt: skip
    path = write(tmp_path / "p.yaml", "params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed: " + json.dumps(ds) + "\n")
    setup = load_plan(path).scenario.setup
    assert (setup.micro_batch, setup.grad_accum, setup.precision, setup.fp32_grad_accum) == (
        4, 2, Precision.fp16_mixed, True)  # fmt: skip


def test_the_run_has_the_precision_the_config_resolves_to(tmp_path):
    # fp16 "auto", no bf16 section, the plan's default bf16-mixed: Accelerate adds bf16, and the scenario's
    # recipe and the config agree on it (the config no longer reads as fp32 beside a bf16-mixed recipe).
    ds = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": "auto"}, "data_types": {"grad_accum_dtype": "fp32"}}
    path = write(tmp_path / "p.yaml", "params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed: " + json.dumps(ds) + "\n")
    run = load_plan(path)
    assert run.config.precision is run.scenario.setup.precision is Precision.bf16_mixed
    assert run.scenario.setup.fp32_grad_accum  # grad_accum_dtype fp32 beside bf16, known only once bf16 is
    assert [a.how.split(":")[0] for a in run.config.autos] == ["training precision bf16-mixed"] * 2
    stated = write(tmp_path / "q.yaml", "params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ntraining:\n  precision: bf16-true\n"
                   "deepspeed: " + json.dumps(ds) + "\n")  # fmt: skip
    with pytest.raises(SpecError, match="training.precision is bf16-true but .* makes DeepSpeed run bf16-mixed"):
        load_plan(stated)


@pytest.mark.parametrize(
    ("plan_text", "needle"),
    [
        ("params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed: missing.json\n", "missing.json: no such file"),
        ("params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed: {zero_optimization: {reduce_bucket_size: 5e8}}\n",
         "YAML reads 5e8 as a string"),
        ("params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\nignore: [low-headrom]\ndeepspeed: {}\n",
         "ignore: unknown rule 'low-headrom'; did you mean low-headroom"),
        ("params: 7e9\nhardware: h100-sxm-8gb\ngpus: 8\ndeepspeed: {}\n", "unknown hardware preset 'h100-sxm-8gb'"),
        ("params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ntraining: {train_micro_batch_size_per_gpu: 2}\n"
         "deepspeed: {train_micro_batch_size_per_gpu: 4}\n", "training.train_micro_batch_size_per_gpu is 2 but"),
        ("params: 7e9\nparams: 8e9\n", "duplicate key 'params'"),
        ("- params\n", "expected a mapping of plan keys, got list"),
        ("params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed: {}\nstage: 3\n", "stage: unknown key; expected one of description, model,"),
    ],
    ids=["missing-config", "yaml-5e8", "unknown-ignore", "unknown-hardware", "conflict", "duplicate-key", "not-a-mapping",
         "unknown-key"],
)  # fmt: skip
def test_load_errors_are_one_line_naming_the_file(tmp_path, plan_text, needle):
    path = write(tmp_path / "p.yaml", plan_text)
    with pytest.raises(SpecError) as info:
        load_plan(path)
    message = str(info.value)
    assert needle in message and "\n" not in message
    assert str(tmp_path) in message


def test_hardware_file_relative_to_the_plan(tmp_path):
    write(tmp_path / "hw" / "mine.yaml", (bundled_config_dir() / "hardware" / "l4-24gb.yaml").read_text().replace(
        "name: l4-24gb", "name: mine"))  # fmt: skip
    path = write(tmp_path / "p.yaml", "params: 1e9\nhardware: hw/mine.yaml\ngpus: 8\ndeepspeed: {train_batch_size: 8}\n")
    assert load_plan(path).scenario.hardware.name == "mine"


def test_yaml_key_lines():
    assert yaml_key_lines("a: 1\nb:\n  c: 2\n  d:\n    e: [1, {f: 2}]\n") == {"a": 1, "b": 2, "b.c": 3, "b.d": 4, "b.d.e": 5}
    assert yaml_key_lines("a: [") == {}



def test_docs_list_every_plan_key():
    from pathlib import Path

    from zeroplan.check.plan import PlanOverheads, Training

    docs = (Path(__file__).parent.parent / "docs" / "checks.md").read_text(encoding="utf-8")
    keys = [*(set(Plan.model_fields) - {"training", "overheads"}), *(f"training.{k}" for k in Training.model_fields),
            *(f"overheads.{k}" for k in PlanOverheads.model_fields)]  # fmt: skip
    table = docs[docs.index("| key | required | meaning |"):docs.index("**Plan and DeepSpeed config together.**")]
    assert [k for k in keys if f"`{k}`" not in table] == []
