"""Issue 25 item 2's readers: torchtune's qlora_* builders, ms-swift's rlhf_type, TRL's KTO config and
LLaMA-Factory's use_asft_loss, each read as the options it means or refused in one line naming the value."""

import json

import pytest
import yaml

from zeroplan.cli.app import app

LLAMA = ("--model", "llama-3.1-8b")


@pytest.fixture
def write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def write(name: str, data: dict) -> str:
        (tmp_path / name).write_text(yaml.safe_dump(data), encoding="utf-8")
        return name

    return write


def estimate(runner, *args: str):
    res = runner.invoke(app, ["estimate", *args, "-f", "json"])
    assert "Traceback" not in res.output and (res.exception is None or isinstance(res.exception, SystemExit))
    return res


def peak(runner, *args: str) -> int:
    res = estimate(runner, *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["stages"][0]["gpu_bytes"]["total"]


def test_torchtune_qlora_builder_is_the_lora_builder_on_a_torchao_nf4_base(runner, write):
    model = {"lora_attn_modules": ["q_proj", "v_proj", "output_proj"], "apply_lora_to_mlp": True, "lora_rank": 8}
    tt = {"tokenizer": {"max_seq_len": 2048}, "batch_size": 2, "dtype": "bf16"}
    qlora = write("q.yaml", {**tt, "model": {"_component_": "torchtune.models.llama3_1.qlora_llama3_1_8b", **model}})
    lora = write("l.yaml", {**tt, "model": {"_component_": "torchtune.models.llama3_1.lora_llama3_1_8b", **model}})
    read = json.loads(estimate(runner, "--from", qlora).stdout)
    assert read["finetune"]["mode"] == "QLoRA"
    # the same run as the lora file with the options the reader names
    assert peak(runner, "--from", qlora) == peak(runner, "--from", lora, "--qlora", "--qlora-stack", "torchtune")
    assert peak(runner, "--from", qlora) < peak(runner, "--from", lora)
