"""`zeroplan advise --from` a file that lays the run on a tensor-parallel mesh: the data-parallel advisor refuses it
in one line (never advising pure data parallelism for an AutoTP run); the parallelism search notes that it
chooses the mesh itself (docs/parallelism.md "Not yet modelled", docs/advisor.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from zeroplan.cli.app import app

FIELD = Path(__file__).parent / "data" / "field" / "deepspeed"
AUTOTP = FIELD / "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z2_autotp_config.json"  # autotp_size 2
HF_AUTOTP = FIELD / "deepspeedai__DeepSpeedExamples__training__tensor_parallel__hf_integration__configs__ds_config.json"
LF = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "finetuning_type": "full", "per_device_train_batch_size": 2,
      "gradient_accumulation_steps": 4, "cutoff_len": 1024, "bf16": True}  # fmt: skip
ACCELERATE_TP = {"distributed_type": "FSDP", "num_processes": 8, "mixed_precision": "bf16",
                 "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": True},
                 "parallelism_config": {"parallelism_config_dp_shard_size": 4, "parallelism_config_tp_size": 2}}


@pytest.fixture
def sft(tmp_path, monkeypatch):
    """A LLaMA-Factory file whose `deepspeed:` names a copy of the given field config, run from tmp_path."""
    monkeypatch.chdir(tmp_path)

    def write(config: Path) -> str:
        (tmp_path / "ds.json").write_text(config.read_text())
        (tmp_path / "sft.yaml").write_text(yaml.safe_dump({**LF, "deepspeed": "ds.json"}))
        return "sft.yaml"

    return write


def _one_error(res) -> str:
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and res.stdout == "", res.output
    return lines[0].removeprefix("error: ")


@pytest.mark.parametrize(("config", "tp"), [(AUTOTP, 2), (HF_AUTOTP, None)])
def test_advise_refuses_an_autotp_file_in_one_line(runner, sft, config, tp):
    tp = tp or json.loads(config.read_text())["tensor_parallel"]["autotp_size"]
    line = _one_error(runner.invoke(app, ["advise", "--from", sft(config), "--gpus", "8"]))
    assert line == (f"ds.json: tensor_parallel.autotp_size {tp} is a tensor-parallel mesh; advise plans data "
                    "parallelism only: add --search-parallelism to plan the mesh, or `zeroplan estimate --from` the "
                    "file for this layout")


def test_advise_refuses_an_accelerate_tp_size(runner, tmp_path):
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(ACCELERATE_TP))
    line = _one_error(runner.invoke(app, ["advise", "--from", str(path), "--model", "llama-3.1-8b"]))
    assert line.startswith(f"{path}: parallelism_config.parallelism_config_tp_size 2 is a tensor-parallel mesh;")


def test_the_search_takes_an_autotp_file_and_says_the_mesh_is_its_own(runner, sft):
    res = runner.invoke(app, ["advise", "--from", sft(AUTOTP), "--gpus", "8", "--search-parallelism", "-f", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert "ds.json: tensor_parallel.autotp_size 2: not kept; the parallelism search chooses the mesh itself" in (
        data["assumptions"])
    assert data["recommendation"] is not None


def test_a_file_without_a_mesh_is_still_advised(runner, sft):
    plain = {k: v for k, v in json.loads(AUTOTP.read_text()).items() if k != "tensor_parallel"}
    Path("plain.json").write_text(json.dumps(plain))
    Path("sft.yaml").write_text(yaml.safe_dump({**LF, "deepspeed": "plain.json"}))
    res = runner.invoke(app, ["advise", "--from", "sft.yaml", "--gpus", "8", "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["recommendation"]["stage"] in (0, 1, 2, 3)
