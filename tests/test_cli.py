"""The CLI end to end with typer's CliRunner: exit codes, JSON, errors on stderr without tracebacks."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zeroplan.cli.app import app

GB = 10**9


def invoke(runner, *args):
    return runner.invoke(app, list(args))


def test_estimate_article_table_json(runner):
    # the source article, 2.1 (docs/advisor.md): 9e9 params, 8 GPUs, pure bf16 AdamW -> 72 / 40.5 / 24.75 / 9 GB of model states
    res = invoke(runner, "estimate", "--params", "9e9", "--gpus", "8", "--precision", "bf16-true", "--units", "gb", "-f", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    rows = [(s["gpu_bytes"]["parameters"], s["gpu_bytes"]["gradients"], s["gpu_bytes"]["optimizer_states"], s["model_states_bytes"]) for s in data["stages"]]
    assert rows == [
        (18 * GB, 18 * GB, 36 * GB, 72 * GB),
        (18 * GB, 18 * GB, 4_500_000_000, 40_500_000_000),
        (18 * GB, 2_250_000_000, 4_500_000_000, 24_750_000_000),
        (2_250_000_000, 2_250_000_000, 4_500_000_000, 9 * GB),
    ]
    assert data["recipe"]["name"] == "bf16-true/adamw"
    assert data["units"]["display"] == "GB"


def test_estimate_article_table_text(runner):
    res = invoke(runner, "estimate", "--params", "9e9", "--gpus", "8", "--precision", "bf16-true", "--units", "gb")
    assert res.exit_code == 0
    line = next(l for l in res.stdout.splitlines() if "= model states" in l or "= model" in l)
    for value in ("72.00", "40.50", "24.75", "9.00"):
        assert value in line
    assert "bf16-true/adamw" in res.stdout


def test_estimate_zero_paper(runner):
    res = invoke(runner, "estimate", "--params", "7.5e9", "--gpus", "64", "-f", "json")
    totals = [s["model_states_bytes"] for s in json.loads(res.stdout)["stages"]]
    assert [round(t / GB, 1) for t in totals] == [120.0, 31.4, 16.6, 1.9]


def test_json_keys_and_integer_bytes(runner):
    data = json.loads(invoke(runner, "estimate", "--params", "1e9", "-f", "json").stdout)
    assert {"num_params", "largest_layer_params"} <= set(data["model"])
    for s in data["stages"]:
        assert set(s["gpu_bytes"]) == {"parameters", "gradients", "optimizer_states", "activations", "buffers", "overhead", "total"}
        assert all(type(v) is int for v in s["gpu_bytes"].values())
        assert type(s["cpu_bytes_per_node"]) is int
        assert "fits" in s


def test_single_stage(runner):
    data = json.loads(invoke(runner, "estimate", "--params", "1e9", "--stage", "2", "-f", "json").stdout)
    assert [s["stage"] for s in data["stages"]] == [2]


def test_offload_cpu_bytes_per_node(runner):
    data = json.loads(invoke(runner, "estimate", "--params", "8e9", "--gpus", "8", "--stage", "3",
                             "--offload-optimizer", "cpu", "--offload-param", "cpu", "-f", "json").stdout)
    stage = data["stages"][0]
    assert stage["gpu_bytes"]["parameters"] == 0 and stage["gpu_bytes"]["optimizer_states"] == 0
    # 8 ranks x (params 2 B + 16-bit grad partition 2 B + optimizer 12 B + fp32 grads 4 B) x 1e9 elements each:
    # ZeRO-3 keeps its gradient partitions on the CPU under optimizer offload (stage3.py, docs/formulas.md)
    assert stage["gpu_bytes"]["gradients"] == 0
    assert stage["cpu_bytes_per_node"] == 8 * 10**9 * (2 + 2 + 12 + 4)


def test_deepspeed_method_json(runner):
    res = invoke(runner, "estimate", "--params", "2851e6", "--largest-layer", "32e6", "--gpus", "8", "--method", "deepspeed", "-f", "json")
    data = json.loads(res.stdout)
    assert set(data) >= {"zero2", "zero3"}
    assert data["zero3"][4] == {"offload_optimizer": "none", "offload_param": "none", "zero_init": True,
                                "cpu_bytes": 1_536_000_000, "gpu_bytes": 6_542_750_000}
    assert data["zero2"][1] == {"offload_optimizer": "none", "cpu_bytes": 136_848_000_000, "gpu_bytes": 12_116_750_000}  # 2 P + int(18 P / 8)


@pytest.mark.parametrize("fmt", ["yaml", "markdown", "table"])
def test_other_formats(runner, fmt):
    res = invoke(runner, "estimate", "--params", "1e9", "-f", fmt)
    assert res.exit_code == 0 and res.stdout.strip()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--params", "0"], "must be positive"),
        (["--params", "-5"], "must be positive"),
        (["--params", "1.5"], "not a whole number"),
        (["--params", "nan"], "not finite"),
        (["--params", "inf"], "not finite"),
        (["--params", "lots"], "not a number"),
        (["--params", "1e9", "--gpus", "12", "--nodes", "5"], "gpus (12) is not a multiple of nodes (5)"),
        (["--params", "1e9", "--gpus", "0"], "must be positive"),
        ([], "give --model"),
        (["--params", "1e9", "--model", "gpt2"], "not both"),
        (["--params", "1e9", "--largest-layer", "2e9"], "larger than --params"),
    ],
)
def test_bad_input_one_line_exit_1(runner, args, needle):
    res = invoke(runner, "estimate", *args)
    assert res.exit_code == 1
    assert needle in res.stderr
    assert res.stdout == ""
    assert "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1


def test_usage_error_exit_2(runner):
    res = invoke(runner, "estimate", "--params", "1e9", "--precision", "int3")
    assert res.exit_code == 2


def test_python_dash_m_works():
    out = subprocess.run([sys.executable, "-m", "zeroplan", "estimate", "--params", "1e9", "-f", "json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["model"]["num_params"] == 10**9


# --- estimate --deepspeed-config ------------------------------------------------------------------------

HF_ZERO3 = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3, "reduce_bucket_size": 2e8,
            "offload_optimizer": {"device": "cpu"}}}  # fmt: skip


@pytest.fixture
def ds_file(tmp_path):
    def write(data, name="ds.json"):
        path = tmp_path / name
        path.write_text(json.dumps(data), encoding="utf-8")
        return str(path)

    return write


def test_estimate_takes_stage_knobs_and_autos_from_the_config(runner, ds_file):
    path = ds_file(HF_ZERO3)
    data = json.loads(invoke(runner, "estimate", "--params", "7e9", "--deepspeed-config", path, "--micro-batch", "4", "-f", "json").stdout)
    assert [s["stage"] for s in data["stages"]] == [3]
    assert data["deepspeed_knobs"]["reduce_bucket_size"] == 200_000_000
    assert data["deepspeed_knobs"]["offload_optimizer"] == "cpu"
    assert data["setup"]["micro_batch"] == 4  # "auto" takes the command line's value
    assert any(a.startswith(f"DeepSpeed config {path}: ZeRO-3") for a in data["assumptions"])
    assert ('"auto" train_batch_size = 32 (dp_world * micro_batch * grad_accum = 8 * 4 * 1; '
            "grad_accum: zeroplan's default, as nothing states it)") in data["assumptions"]  # --micro-batch was given


def test_estimate_options_given_override_the_config(runner, ds_file):
    path = ds_file({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8, "fp16": {"enabled": True},
                    "zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8, "offload_optimizer": {"device": "cpu"}}})  # fmt: skip
    from_file = json.loads(invoke(runner, "estimate", "--params", "7e9", "--deepspeed-config", path, "-f", "json").stdout)
    assert (from_file["setup"]["micro_batch"], from_file["setup"]["grad_accum"], from_file["setup"]["precision"]) == (2, 8, "fp16-mixed")
    assert from_file["deepspeed_knobs"]["offload_optimizer"] == "cpu"
    res = invoke(runner, "estimate", "--params", "7e9", "--deepspeed-config", path, "--micro-batch", "1", "--stage", "1",
                 "--reduce-bucket-size", "1e6", "--offload-optimizer", "none", "--precision", "bf16-mixed", "-f", "json")
    data = json.loads(res.stdout)
    assert [s["stage"] for s in data["stages"]] == [1]
    assert (data["setup"]["micro_batch"], data["setup"]["grad_accum"], data["setup"]["precision"]) == (1, 8, "bf16-mixed")
    assert data["deepspeed_knobs"]["reduce_bucket_size"] == 1_000_000 and data["deepspeed_knobs"]["offload_optimizer"] == "none"


def test_estimate_states_the_precision_it_uses_once(runner, ds_file):
    # fp16 "auto" and no bf16 section, run at zeroplan's default bf16-mixed: Accelerate adds the bf16 section,
    # so the config is not read as fp32 while the byte recipe is bf16-mixed.
    path = ds_file({"fp16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}})
    data = json.loads(invoke(runner, "estimate", "--params", "7e9", "--deepspeed-config", path, "-f", "json").stdout)
    assert data["setup"]["precision"] == "bf16-mixed" and not any("fp32" in a for a in data["assumptions"])
    assert any(a.startswith(f"DeepSpeed config {path}: ZeRO-2, bf16-mixed,") for a in data["assumptions"])
    assert any(a.startswith("bf16.enabled = True, not in the file (training precision bf16-mixed: zeroplan's default")
               for a in data["assumptions"])  # fmt: skip
    fp16 = json.loads(invoke(runner, "estimate", "--params", "7e9", "--deepspeed-config", path, "--precision",
                             "fp16-mixed", "-f", "json").stdout)  # fmt: skip
    assert fp16["setup"]["precision"] == "fp16-mixed" and '"auto" fp16.enabled = True (training precision fp16-mixed)' \
        in fp16["assumptions"]
    fp32 = json.loads(invoke(runner, "estimate", "--params", "7e9", "--deepspeed-config", ds_file({"bf16": {"enabled": True},
                      "train_micro_batch_size_per_gpu": 1}), "--precision", "fp32", "-f", "json").stdout)  # fmt: skip
    assert any(": ZeRO-0, fp32 (--precision; the config makes DeepSpeed run bf16-mixed)," in a for a in fp32["assumptions"])


def test_estimate_warns_about_duplicate_and_unknown_keys_on_stderr(runner, tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1,\n "_comment": "x",\n "zero_optimization": {"stage": 2,\n'
                    '  "stage": 3, "reduce_bucket": 5}}', encoding="utf-8")  # fmt: skip
    res = invoke(runner, "estimate", "--params", "7e9", "--deepspeed-config", str(path), "-f", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["stages"][0]["stage"] == 3  # json.load keeps the last one
    assert res.stderr.splitlines() == [
        f"warning: {path}:2: unknown top-level key _comment: DeepSpeed ignores it silently",
        (f"warning: {path}:4: unknown key zero_optimization.reduce_bucket: DeepSpeed validates zero_optimization with "
         "extra keys forbidden and fails; did you mean zero_optimization.reduce_bucket_size?"),
        (f"warning: {path}:4: duplicate key zero_optimization.stage (first on line 3): DeepSpeed raises 'Duplicate keys "
         "in DeepSpeed config'; json.load (Hugging Face) silently keeps the last one"),
    ]


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "no such file"), ("{", "invalid JSON"), ('{"zero_optimization": {"stage": 7}}', "must be 0, 1, 2 or 3"),
     ('{"train_batch_size": 8, "elasticity": {"enabled": true}}', "elasticity: removed in DeepSpeed 0.19.8"),
     ('{"train_batch_size": 8, "zero_optimization": {"mics_shard_size": 8}}', "zero_optimization.mics_shard_size: removed")],
)  # fmt: skip
def test_estimate_bad_config_is_one_line_exit_1(runner, tmp_path, content, needle):
    path = tmp_path / "ds.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    res = invoke(runner, "estimate", "--params", "7e9", "--deepspeed-config", str(path))
    assert res.exit_code == 1 and needle in res.stderr and "Traceback" not in res.output
    assert len(res.stderr.splitlines()) == 1


def test_estimate_states_its_setup_and_activation_lines(runner):
    res = runner.invoke(app, ["estimate", "--model", "gemma2-9b"])
    assert res.exit_code == 0
    assert "seq-len 2048, micro-batch 1, gradient accumulation 1, checkpointing none, attention flash" in res.stdout
    for line in ("layers", "logits (b x s x V)", "logit soft-capping", "loss (fp32 copy, log-softmax, labels)"):
        assert line in res.stdout


@pytest.mark.parametrize("name", ["x[/red]", "[bold]llama", "gpu[0]:1"])
def test_brackets_in_user_text_print_as_typed(runner, name):
    # Rich markup is off: a name that looks like a [style] tag is neither swallowed nor a MarkupError traceback.
    res = invoke(runner, "estimate", "--model", name)
    assert res.exit_code == 1
    assert name in res.stderr and "Traceback" not in res.output and "MarkupError" not in res.output


# One rule for GPUs per node, in every command (memory.setup.spread_gpus): without --nodes, the fewest
# nodes of the hardware's size that hold the GPUs evenly; with --nodes, refused past a node's size.
@pytest.mark.parametrize("command", ["estimate", "capacity", "throughput", "advise"])
def test_gpus_spread_over_the_fewest_nodes_of_the_hardware(runner, command):
    args = [command, "--params", "9e9", "--gpus", "64", "-f", "json"]
    if command == "estimate":
        data = json.loads(runner.invoke(app, args).stdout)
        assert data["parallelism"] == {"gpus": 64, "nodes": 8, "dp": 64, "gpus_per_node": 8}
    result = runner.invoke(app, [*args, "--nodes", "1"])
    assert result.exit_code == 1
    assert "64 GPUs per node (64 GPUs on 1 node) exceed the 8 a h100-sxm-80gb node holds" in result.stderr


def test_gpus_that_do_not_split_over_the_nodes_they_need_name_the_nodes(runner):
    result = runner.invoke(app, ["estimate", "--params", "9e9", "--gpus", "20"])
    assert result.exit_code == 1
    assert "20 GPUs do not split evenly over the 3 nodes of 8 they need on h100-sxm-80gb" in result.stderr


def test_the_readme_advise_example_spreads_sixteen_gpus_over_two_nodes(runner, tmp_path):
    out = tmp_path / "ds.json"
    result = runner.invoke(app, ["advise", "--model", "llama-3.1-70b", "--gpus", "16", "--emit-deepspeed", str(out), "-f", "json"])
    assert result.exit_code == 0 and out.is_file()
    assert json.loads(result.stdout)["recommendation"]["topology"] == "multinode"


@pytest.mark.parametrize(("written", "count"), [("9B", 9 * 10**9), ("7b", 7 * 10**9), ("1.5T", 15 * 10**11),
                                                ("124M", 124 * 10**6), ("9e9", 9 * 10**9)])
def test_params_take_the_suffixes_the_output_prints(runner, written, count):
    result = runner.invoke(app, ["estimate", "--params", written, "-f", "json"])
    model = json.loads(result.stdout)["model"]
    assert model["num_params"] == count
    assert model["num_active_params"] == count  # a bare count is dense: every parameter is active


def test_sequence_lengths_take_no_suffix(runner):
    # "4k" tokens usually means 4096: no guess, a clear error.
    result = runner.invoke(app, ["estimate", "--params", "9B", "--seq-len", "4k"])
    assert result.exit_code == 1 and "--seq-len '4k' is not a number" in result.stderr


def test_a_short_hardware_name_gets_the_presets_it_abbreviates(runner):
    result = runner.invoke(app, ["estimate", "--params", "9B", "--hardware", "h100"])
    assert result.exit_code == 1
    assert "unknown hardware preset 'h100'; did you mean" in result.stderr
    assert "h100-sxm-80gb" in result.stderr and "h100-pcie-80gb" in result.stderr


@pytest.mark.parametrize("command", [["models"], ["hardware"], ["capacity", "--model", "gemma2-9b"],
                                     ["throughput", "--model", "gemma2-9b"], ["estimate", "--params", "9e9", "--method", "deepspeed"]])
def test_every_json_document_names_its_schema_version(runner, command):
    assert json.loads(runner.invoke(app, [*command, "-f", "json"]).stdout)["schema_version"] == 1


def test_a_failure_with_format_json_is_a_json_document_too(runner):
    result = runner.invoke(app, ["estimate", "--params", "0", "-f", "json"])
    assert result.exit_code == 1 and result.stderr == "error: --params '0' must be positive\n"
    assert json.loads(result.stdout) == {"schema_version": 1, "error": {"messages": ["--params '0' must be positive"],
                                                                        "exit_code": 1}}


@pytest.mark.parametrize("command", [["estimate", "--params", "9e9"], ["advise"], ["models"],
                                     ["check", "configs/plans/gemma2-9b-zero0-8xh100.yaml"]])
def test_text_sent_to_a_file_has_no_trailing_spaces(command):
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-m", "zeroplan", *command], capture_output=True, text=True, cwd=root)
    assert out.stdout.strip() and [line for line in out.stdout.splitlines() if line != line.rstrip()] == []


def test_the_stacked_bar_draws_every_part_that_is_there():
    import zeroplan
    from zeroplan.cli import render
    from zeroplan.units import Unit

    est = zeroplan.estimate(params=70e9, gpus=512)  # ZeRO-3's gradients: under 1 % of ZeRO-0's bar
    bars = render.stacked_bars(est, Unit.gib).renderables
    for stage, bar in zip(est.stages, bars):
        drawn = bar.plain[13:].rsplit(" ", 2)[0]  # between the 12-wide stage label and the total
        for key, glyph, _ in render.BAR_PARTS:
            assert (glyph in drawn) == (stage.gpu_bytes()[key] > 0), (stage.stage, key)


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize("command", [["estimate", "--model", "gemma2-9b"], ["advise"], ["throughput", "--model", "gemma2-9b"],
                                     ["models"], ["hardware"], ["sweep", "--params", "9e9"]])
def test_tables_on_a_narrow_terminal_fold_and_never_cut(runner, monkeypatch, command, width):
    from zeroplan.cli import common

    wide = common.console
    monkeypatch.setattr(common, "console", lambda stderr=False: setattr(c := wide(stderr), "width", width) or c)
    out = runner.invoke(app, command).stdout
    assert "…" not in out and max(map(len, out.splitlines())) <= width  # folded onto more lines, nothing dropped


@pytest.mark.parametrize("command", ["estimate", "advise", "check", "capacity", "throughput", "sweep"])
def test_help_at_80_columns_shows_every_option_name_whole(runner, command):
    import typer.main

    out = runner.invoke(app, [command, "--help"], terminal_width=80).stdout
    click_command = typer.main.get_command(app).commands[command]
    names = [opt for param in click_command.params for opt in param.opts if opt.startswith("--")]
    assert names and [name for name in names if not re.search(re.escape(name) + r"(?![\w-])", out)] == []


def test_version(runner):
    from zeroplan.version import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"zeroplan {__version__}\n"
