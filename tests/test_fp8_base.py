"""An FP8 block-scaled checkpoint as a frozen LoRA base: its stored bytes (float8 weights + fp32 block scales) equal
what transformers' FP8Linear holds (validation/fp8_base.json, measured by validation/measure_fp8_base.py); full
fine-tuning of it, a sharded engine under it and a bitsandbytes option beside it are refused in one line."""

import json
from pathlib import Path

import pytest

from zeroplan.cli.app import app
from zeroplan.memory.quant import fp8_block_bytes
from zeroplan.scenario import ScenarioArgs, scenario

ROOT = Path(__file__).resolve().parent.parent
MEASURED = json.loads((ROOT / "validation" / "fp8_base.json").read_text(encoding="utf-8"))


def _config(tmp_path: Path, name: str) -> str:
    from validation.measure_fp8_base import BLOCK, CONFIGS

    folder = tmp_path / name
    folder.mkdir()
    data = {**CONFIGS[name], "quantization_config": {"quant_method": "fp8", "weight_block_size": BLOCK}}
    (folder / "config.json").write_text(json.dumps(data), encoding="utf-8")
    return str(folder)


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_the_stored_bytes_equal_transformers_fp8linear(tmp_path, name):
    scn = scenario(ScenarioArgs(model=_config(tmp_path, name), lora_rank="8", lora_targets="all-linear", gpus="1", engine="ddp"))
    assert scn.tuning.packed_bytes + scn.tuning.quant_state_bytes == MEASURED[name]["transformers"]
    assert scn.tuning.spec.mode == "LoRA on an FP8 base"


def test_block_scales_round_up():
    assert fp8_block_bytes(1000, 320, (128, 128)) == (320_000, 4 * 8 * 3)


@pytest.mark.parametrize(("options", "words"), [
    ((), "a fp8 base cannot be trained: give --lora-rank R for adapters on it"),
    (("--lora-rank", "8", "--qlora"), "an FP8 checkpoint, stored quantized already: --qlora / --load-in-8bit do not apply"),
    (("--lora-rank", "8", "--engine", "fsdp2"), "an FP8 checkpoint's base under --engine fsdp2 is not modelled"),
])  # fmt: skip
def test_what_is_not_modelled_is_one_line(runner, tmp_path, options, words):
    res = runner.invoke(app, ["estimate", "--model", _config(tmp_path, "llama-tiny"), "--gpus", "2", *options])
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1 and words in res.stderr, res.output
