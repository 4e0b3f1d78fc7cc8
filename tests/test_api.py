"""The Python API (zeroplan/api.py, docs/api.md): every example on the page runs, the API answers what the CLI
answers with the same defaults and the same error messages, and `import zeroplan` stays light."""

import inspect
import json
import re
import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
import typer.main

import zeroplan
from zeroplan import api
from zeroplan.cli.app import app
from zeroplan.validate import as_json

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "api.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_python_block_in_docs_api_runs(block, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    exec(compile(block, str(DOC), "exec"), {"__name__": "docs_api"})


def test_the_page_has_a_block_per_function():
    for name in ("estimate", "recommend", "check_plans", "count_params", "model_names", "hardware_names",
                 "load_model", "load_hardware", "to_dict"):
        assert any(f"zeroplan.{name}(" in block for block in BLOCKS), name


def cli_json(runner, *args):
    res = runner.invoke(app, [*args, "-f", "json"])
    return res.exit_code, json.loads(res.stdout)


@pytest.mark.parametrize(("argv", "kwargs"), [
    (["--model", "gemma2-9b"], {"model": "gemma2-9b"}),
    (["--params", "9e9", "--gpus", "16", "--nodes", "2", "--precision", "bf16-true", "--units", "gb"],
     {"params": 9e9, "gpus": 16, "nodes": 2, "precision": "bf16-true"}),
    (["--params", "2851e6", "--largest-layer", "32e6", "--hardware", "none", "-s", "3"],
     {"params": "2851e6", "largest_layer": 32_000_000, "hardware": None, "stage": 3}),
    (["--model", "llama-3.1-8b", "--engine", "fsdp2", "--checkpointing", "full", "--micro-batch", "4"],
     {"model": "llama-3.1-8b", "engine": zeroplan.Engine.fsdp2, "checkpointing": "full", "micro_batch": 4}),
    (["--model", "mixtral-8x7b", "--offload-optimizer", "cpu", "--offload-param", "cpu", "--reduce-bucket-size", "2e8",
      "--no-overlap-comm", "--fragmentation", "0.1"],
     {"model": "mixtral-8x7b", "offload_optimizer": "cpu", "offload_param": "cpu", "reduce_bucket_size": 2e8,
      "overlap_comm": False, "fragmentation": 0.1}),
    (["--model", "gemma2-9b", "--deepspeed-config", "configs/plans/ds/article-zero3-bf16.json", "--micro-batch", "2"],
     {"model": "gemma2-9b", "deepspeed_config": Path("configs/plans/ds/article-zero3-bf16.json"), "micro_batch": 2}),
    (["--model", "llama-3.1-70b", "--gpus", "32", "--tp", "4", "--pp", "2", "--sequence-parallel"],
     {"model": "llama-3.1-70b", "gpus": 32, "tp": 4, "pp": 2, "sequence_parallel": True}),
    (["--model", "llama-3.1-8b", "--gpus", "16", "--pp", "4", "--vpp", "2", "--pp-schedule", "interleaved-1f1b",
      "--cp", "2", "-s", "3"],
     {"model": "llama-3.1-8b", "gpus": 16, "pp": "4", "vpp": 2, "pp_schedule": "interleaved-1f1b", "cp": 2, "stage": 3}),
    (["--model", "mixtral-8x7b", "--gpus", "16", "--tp", "2", "--ep", "8", "--engine", "deepspeed"],
     {"model": "mixtral-8x7b", "gpus": 16, "tp": 2, "ep": 8, "pp_schedule": zeroplan.Schedule.one_f_one_b}),
    (["--model", "llama-3.1-8b", "--engine", "fsdp2", "--tp", "2"], {"model": "llama-3.1-8b", "engine": "fsdp2", "tp": 2}),
], ids=["preset", "bare-count", "one-stage-no-hardware", "fsdp2", "offload-and-knobs", "deepspeed-config",
        "tp-pp-sp", "pp-vpp-cp", "moe-tp-ep", "fsdp2-tp"])
def test_estimate_is_what_the_cli_prints(runner, monkeypatch, argv, kwargs):
    monkeypatch.chdir(ROOT)
    code, printed = cli_json(runner, "estimate", *argv)
    units = zeroplan.Unit.gb if "gb" in argv else "gib"  # a member or its value
    assert code == 0
    assert zeroplan.to_dict(zeroplan.estimate(**kwargs), units=units) == printed


@pytest.mark.parametrize(("argv", "kwargs"), [
    ([], {}),
    (["--model", "llama-3.1-70b", "--gpus", "16", "--nodes", "2"], {"model": "llama-3.1-70b", "gpus": 16, "nodes": 2}),
    (["--policy", "article", "--topology", "pcie", "--global-batch", "1024"],
     {"policy": "article", "topology": "pcie", "global_batch": 1024}),
    (["--model", "llama-3.1-8b", "--engine", "fsdp", "--set", "max_zero3_overhead_pct=5"],
     {"model": "llama-3.1-8b", "engine": "fsdp", "thresholds": {"max_zero3_overhead_pct": 5}}),
    (["--model", "llama-3.1-8b", "--gpus", "16", "--seq-len", "4096", "--global-batch", "64", "--search-parallelism"],
     {"model": "llama-3.1-8b", "gpus": 16, "seq_len": 4096, "global_batch": 64, "search_parallelism": True}),
    (["--model", "llama-3.1-70b", "--gpus", "32", "--search-parallelism", "--stack", "deepspeed", "--global-batch", "128"],
     {"model": "llama-3.1-70b", "gpus": 32, "search_parallelism": True, "stack": "deepspeed", "global_batch": 128}),
    (["--model", "llama-3.1-8b", "--set", "search_parallelism=true"],
     {"model": "llama-3.1-8b", "thresholds": {"search_parallelism": True}}),
], ids=["defaults", "multinode", "article-pcie", "fsdp-threshold", "search", "search-deepspeed", "search-by-policy"])
def test_recommend_is_what_advise_prints(runner, argv, kwargs):
    code, printed = cli_json(runner, "advise", *argv)
    view = zeroplan.to_dict(zeroplan.recommend(**kwargs))
    if "thresholds" in kwargs:  # the same value, from --set in one and the mapping in the other
        for key in kwargs["thresholds"]:
            assert printed["policy"]["thresholds"][key].pop("source") == "set by --set"
            assert view["policy"]["thresholds"][key].pop("source") == "set by thresholds"
    assert code == 0
    assert view == printed


def test_check_plans_is_what_check_prints(runner, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = runner.invoke(app, ["check", "configs/plans/*.yaml", "--ignore", "low-headroom", "-f", "json"])
    report = zeroplan.check_plans(Path("configs/plans/*.yaml"), ignore="low-headroom")
    assert zeroplan.to_dict(report) == json.loads(res.stdout)
    assert report.exit_code == res.exit_code == 1


def test_count_params_and_the_preset_lists_are_what_the_cli_lists(runner):
    _, models = cli_json(runner, "models")
    _, hardware = cli_json(runner, "hardware")
    assert zeroplan.model_names() == [row["name"] for row in models["models"]]
    assert zeroplan.hardware_names() == [row["name"] for row in hardware["hardware"]]
    for row in models["models"]:
        counts = zeroplan.count_params(row["name"])
        assert (counts.num_params, counts.largest_layer_params, counts.num_active_params) == (
            row["num_params"], row["largest_layer_params"], row["num_active_params"]), row["name"]
    assert [as_json(h) for h in map(zeroplan.load_hardware, zeroplan.hardware_names())] == hardware["hardware"]


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma2-9b", "mixtral-8x7b", "t5-3b"])
def test_count_params_takes_every_form_of_a_model(name):
    spec = zeroplan.load_model(name)
    expected = zeroplan.count_params(name)
    hf_mapping = spec.config.model_dump(mode="json")
    assert zeroplan.count_params(ROOT / "configs" / "models" / f"{name}.yaml") == expected
    assert zeroplan.count_params(hf_mapping) == expected
    assert zeroplan.count_params(spec) == zeroplan.count_params(spec.config) == expected


def test_enum_members_and_their_values_are_the_same_input():
    by_value = zeroplan.estimate(model="gpt2", precision="fp16-mixed", optimizer="lion", attention="eager")
    by_member = zeroplan.estimate(model="gpt2", precision=zeroplan.Precision.fp16_mixed,
                                  optimizer=zeroplan.Optimizer.lion, attention=zeroplan.Attention.eager)
    assert zeroplan.to_dict(by_value) == zeroplan.to_dict(by_member)


def test_to_dict_prints_the_bytes_the_cli_prints(runner):
    res = runner.invoke(app, ["estimate", "--model", "qwen2.5-7b", "--units", "gb", "-f", "json"])
    data = zeroplan.to_dict(zeroplan.estimate(model="qwen2.5-7b"), units="gb")
    assert json.dumps(data, indent=2) + "\n" == res.stdout


@pytest.mark.parametrize(("argv", "call"), [
    (["estimate", "--model", "llama-3.1-70b", "--gpus", "32", "--tp", "8", "--cp", "2", "--units", "gb"],
     lambda: zeroplan.to_dict(zeroplan.estimate(model="llama-3.1-70b", gpus=32, tp=8, cp=2), units="gb")),
    (["advise", "--model", "llama-3.1-8b", "--gpus", "16", "--search-parallelism", "--stack", "torchtitan"],
     lambda: zeroplan.to_dict(zeroplan.recommend(model="llama-3.1-8b", gpus=16, search_parallelism=True,
                                                 stack="torchtitan"))),
], ids=["mesh-estimate", "search"])
def test_the_mesh_and_the_search_print_the_bytes_the_cli_prints(runner, argv, call):
    res = runner.invoke(app, [*argv, "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.dumps(call(), indent=2) + "\n" == res.stdout


@pytest.mark.parametrize(("argv", "call"), [
    (["estimate", "--model", "gemma-9b"], lambda: zeroplan.estimate(model="gemma-9b")),
    (["estimate", "--model", "gpt2", "--params", "1e9"], lambda: zeroplan.estimate(model="gpt2", params=1e9)),
    (["estimate"], lambda: zeroplan.estimate()),
    (["estimate", "--params", "9e9", "--gpus", "12", "--nodes", "5"], lambda: zeroplan.estimate(params=9e9, gpus=12, nodes=5)),
    (["estimate", "--params", "9e9", "--gpus", "0"], lambda: zeroplan.estimate(params=9e9, gpus=0)),
    (["estimate", "--params", "1.5"], lambda: zeroplan.estimate(params=1.5)),
    (["estimate", "--params", "9e9", "--hardware", "h100"], lambda: zeroplan.estimate(params=9e9, hardware="h100")),
    (["estimate", "--params", "9e9", "--fragmentation", "2"], lambda: zeroplan.estimate(params=9e9, fragmentation=2)),
    (["estimate", "--model", "gpt2", "--engine", "ddp", "-s", "3"], lambda: zeroplan.estimate(model="gpt2", engine="ddp", stage=3)),
    (["advise", "--hardware", "none"], lambda: zeroplan.recommend(hardware=None)),
    (["advise", "--global-batch", "12"], lambda: zeroplan.recommend(global_batch=12)),
    (["advise", "--set", "max_zero3_overhead=3"], lambda: zeroplan.recommend(thresholds={"max_zero3_overhead": 3})),
    (["check", "configs/plans/*.yaml", "--ignore", "no-such-rule"],
     lambda: zeroplan.check_plans("configs/plans/*.yaml", ignore=["no-such-rule"])),
    (["estimate", "--model", "llama-3.1-8b", "--tp", "3"], lambda: zeroplan.estimate(model="llama-3.1-8b", tp=3)),
    (["estimate", "--params", "9e9", "--tp", "2"], lambda: zeroplan.estimate(params=9e9, tp=2)),
    (["estimate", "--model", "llama-3.1-8b", "--engine", "fsdp2", "--pp", "2"],
     lambda: zeroplan.estimate(model="llama-3.1-8b", engine="fsdp2", pp=2)),
    (["advise", "--search-parallelism", "--policy", "article"],
     lambda: zeroplan.recommend(search_parallelism=True, policy="article")),
], ids=["unknown-preset", "model-and-params", "no-model", "gpus-nodes", "zero-gpus", "fraction", "unknown-hardware",
        "fragmentation", "engine-stage", "no-hardware", "global-batch", "unknown-threshold", "unknown-rule",
        "tp-not-dividing", "mesh-on-a-count", "fsdp2-pp", "search-article"])
def test_bad_input_raises_the_message_the_cli_prints(runner, monkeypatch, argv, call):
    monkeypatch.chdir(ROOT)
    res = runner.invoke(app, argv)
    with pytest.raises(zeroplan.ZeroplanError) as raised:
        call()
    printed = res.stderr.strip().removeprefix("error: ")
    # the CLI's --set and the API's thresholds mapping are named as given
    assert str(raised.value).replace("thresholds:", "--set:") == printed
    assert res.exit_code in (1, 2)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: zeroplan.estimate(model="gpt2", precision="fp8"), "--precision 'fp8' is not one of: bf16-mixed, fp16-mixed, bf16-true, fp32"),
    (lambda: zeroplan.estimate(model="gpt2", stage=4), "--stage 4 is not one of: 0, 1, 2, 3"),
    (lambda: zeroplan.estimate(model="gpt2", stage=True), "--stage True is not an int"),
    (lambda: zeroplan.estimate(model="gpt2", gpus=None), "--gpus None is not a number"),
    (lambda: zeroplan.estimate(model="gpt2", dora=None), "--dora None is not True or False"),
    (lambda: zeroplan.estimate(model="gpt2", lora_targets=5), "--lora-targets 5 is not text or a list of text"),
    (lambda: zeroplan.estimate(model="gpt2", bogus=1), "estimate(): got an unexpected keyword argument 'bogus'"),
    (lambda: zeroplan.check_plans(None), "check_plans(plans=) None is not text or a path"),
    (lambda: zeroplan.estimate(model="gpt2", gpus=True), "--gpus True is not a number"),
    (lambda: zeroplan.estimate(model="gpt2", nccl_gib="1"), "--nccl-gib '1' is not a number"),
    (lambda: zeroplan.recommend(topology="infiniband"), "--topology 'infiniband' is not one of: nvlink, pcie, multinode"),
    (lambda: zeroplan.recommend(policy="strict"), "unknown policy 'strict'; policies: article, default"),
    (lambda: zeroplan.recommend(search_parallelism=True, stack="megatron"), "--stack 'megatron' is not one of: auto, deepspeed, torchtitan"),
    (lambda: zeroplan.estimate(model="llama-3.1-8b", pp=2, pp_schedule="zb"), "--pp-schedule 'zb' is not one of: 1f1b, interleaved-1f1b, gpipe, interleaved-zb, zbv"),
    (lambda: zeroplan.estimate(model="llama-3.1-8b", tp=True), "--tp True is not a number"),
    (lambda: zeroplan.check_plans(), "give plan files (or globs), --deepspeed-config PATH with --model or --params, or --from FILE"),
    (lambda: zeroplan.count_params(7e9), "count_params takes a preset name, a model file path, a config mapping or a ModelSpec, not float"),
    (lambda: zeroplan.to_dict(zeroplan.count_params("gpt2")), "to_dict takes an Estimate, an Advice, a LayoutAdvice or a CheckReport, not ParamCount"),
    (lambda: zeroplan.to_dict(zeroplan.estimate(model="gpt2"), units="mib"), "--units 'mib' is not one of: gib, gb"),
    (lambda: zeroplan.load_model("gpt3"), "unknown model preset 'gpt3'; did you mean gpt2, gpt2-xl, opt-1.3b?"),
])
def test_what_only_the_api_can_be_given_is_refused_in_the_same_words(call, message):
    """Wrong types and choices, which click refuses before the CLI sees them: one line, naming the option."""
    with pytest.raises(zeroplan.ZeroplanError, match=f"^{re.escape(message)}$"):
        call()


def _plain(value):
    return value.value if isinstance(value, Enum) else value


@pytest.mark.parametrize(("function", "command"), [(api.estimate, "estimate"), (api.recommend, "advise")])
def test_the_api_defaults_are_the_clis(function, command):
    cli = {p.name: p.default for p in typer.main.get_command(app).commands[command].params}
    ours = {name: p.default for name, p in inspect.signature(function).parameters.items()}
    shared = sorted(set(cli) & set(ours))
    assert len(shared) >= 12
    assert {k: str(_plain(ours[k])) for k in shared} == {k: str(_plain(cli[k])) for k in shared}


def test_every_api_argument_is_keyword_only():
    for name in ("estimate", "recommend", "check_plans"):
        kinds = {p.kind for p in inspect.signature(getattr(api, name)).parameters.values()}
        assert kinds <= {inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_POSITIONAL}, name


def test_no_api_name_is_shadowed_by_a_subpackage():
    """`import zeroplan.advise.advisor` binds zeroplan.advise to the package, over any function of that name."""
    import zeroplan.cli.app  # noqa: F401  (imports every floor)

    assert [n for n in zeroplan.__all__ if (ROOT / "zeroplan" / n).exists() or (ROOT / "zeroplan" / f"{n}.py").exists()] == []
    for name in zeroplan.__all__:
        assert getattr(zeroplan, name) is not None
    assert callable(zeroplan.estimate) and callable(zeroplan.recommend)
    assert set(zeroplan.__all__) <= set(dir(zeroplan))
    with pytest.raises(AttributeError, match="no attribute 'advice'"):
        zeroplan.advice  # noqa: B018


def _modules_after(code: str) -> list[str]:
    probe = "\nimport sys\nprint(sorted(m for m in ('typer', 'rich', 'click', 'zeroplan.api', 'pydantic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code + probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().replace("'", '"'))


def test_import_zeroplan_loads_neither_the_ui_nor_the_api():
    assert _modules_after("import zeroplan\nzeroplan.__version__") == []


@pytest.mark.parametrize("code", ["zeroplan.estimate(params=9e9)", "zeroplan.to_dict(zeroplan.recommend())",
                                  "zeroplan.check_plans('configs/plans/*.yaml')", "zeroplan.count_params('gpt2')"])
def test_the_api_loads_on_first_use_and_never_the_ui(code):
    loaded = _modules_after(f"import zeroplan\n{code}")
    assert "zeroplan.api" in loaded and not {"typer", "rich", "click"} & set(loaded)
