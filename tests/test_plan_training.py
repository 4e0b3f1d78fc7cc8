"""A plan's training block says the training loop and torch.compile as estimate's options do, and a plan on one
device (engine none) needs no engine block (check/plan.py)."""

import json

import yaml
from typer.testing import CliRunner

from zeroplan import api
from zeroplan.cli.app import app

PLAN = {"description": "litgpt QLoRA on one GPU", "model": "llama-3.1-8b", "hardware": "a100-sxm-80gb", "gpus": 1,
        "engine": "none", "training": {"precision": "bf16-true", "seq_len": 512, "train_micro_batch_size_per_gpu": 4},
        "finetune": {"lora_rank": 16, "quant": "nf4", "qlora_stack": "litgpt"}}


def _checked(tmp_path, plan: dict) -> int:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    done = CliRunner().invoke(app, ["check", str(path), "-f", "json"])
    assert done.exit_code in (0, 1), done.output  # 1: the plan does not fit, its memory still reported
    return json.loads(done.output)["plans"][0]["memory"]["peak_bytes"]


def _peak(tmp_path, **training) -> int:
    return _checked(tmp_path, {**PLAN, "training": {**PLAN["training"], **training}})


def _estimate(**kw) -> int:
    return api.estimate(model="llama-3.1-8b", hardware="a100-sxm-80gb", gpus=1, engine="none", stage=0,
                        precision="bf16-true", seq_len=512, micro_batch=4, lora_rank=16, qlora=True,
                        qlora_stack="litgpt", **kw).stages[0].total


def test_a_plans_training_loop_is_estimates_and_defaults_to_litgpts_under_its_stack(tmp_path):
    assert _peak(tmp_path) == _peak(tmp_path, training_loop="litgpt") == _estimate()
    assert _peak(tmp_path, training_loop="trainer") == _estimate(training_loop="trainer") < _peak(tmp_path)


def test_a_plans_compile_is_estimates(tmp_path):
    plan = {k: v for k, v in PLAN.items() if k != "finetune"}
    full = dict(model="llama-3.1-8b", hardware="a100-sxm-80gb", gpus=1, engine="none", stage=0, precision="bf16-true",
                seq_len=8192, micro_batch=4)  # activations, not the optimizer step, make the peak
    training = {**plan["training"], "seq_len": 8192, "compile": True}
    compiled = _checked(tmp_path, {**plan, "training": training})
    assert compiled == api.estimate(**full, compile=True).stages[0].total < api.estimate(**full).stages[0].total
