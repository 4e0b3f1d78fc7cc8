"""--method megatron: Megatron-LM's theoretical memory formula to the byte, and a model mapped to its arguments.

The vectors are what Megatron-LM's own theoretical_memory_usage.py returned for each case, run by
validation/megatron_reference.py (the source commit is in the file).
"""

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.megatron.mapping import Mesh, megatron_args
from zeroplan.megatron.theory import MEGATRON_COMMIT, MegatronArgs, padded_vocab_size, theoretical_memory
from zeroplan.models.presets import load_model

VECTORS = json.loads((Path(__file__).parent / "data" / "megatron" / "vectors.json").read_text())
CASES = VECTORS["cases"]


def _args(case: dict) -> MegatronArgs:
    args = dict(case["args"])
    if isinstance(args["moe_layer_freq"], list):
        args["moe_layer_freq"] = tuple(args["moe_layer_freq"])
    return MegatronArgs(**args)


def test_vectors_come_from_the_commit_zeroplan_reproduces():
    assert VECTORS["source"] == f"NVIDIA/Megatron-LM@{MEGATRON_COMMIT}:megatron/training/theoretical_memory_usage.py"
    assert len(CASES) >= 15
    assert {c["activation_formula"] for c in CASES} == {"with_sp", "without_sp"}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_megatron_bytes_exactly(case):
    got = theoretical_memory(_args(case), case["num_microbatches"])
    assert got.weight_and_optimizer_bytes == case["weight_and_optimizer_bytes"]
    assert got.activation_bytes == case["activation_bytes"]
    assert got.activation_formula == case["activation_formula"]


PRESET_CASES = [c for c in CASES if "preset" in c]


@pytest.mark.parametrize("case", PRESET_CASES, ids=[c["name"] for c in PRESET_CASES])
def test_presets_map_to_the_arguments_megatron_was_run_with(case):
    mapped = megatron_args(load_model(case["preset"]).architecture(), Mesh(**case["mesh"]), seq_len=case["seq_len"],
                           micro_batch=case["micro_batch"], distributed_optimizer=case["distributed_optimizer"],
                           recompute=case["recompute"])
    assert asdict(mapped) == asdict(_args(case))


def test_vocab_padding_is_to_128_times_tp():
    # megatron/core/tokenizers/utils/build_tokenizer.py: ceil(V / (128 t)) x 128 t
    assert padded_vocab_size(128256, 1) == 128256  # 1002 x 128
    assert padded_vocab_size(128256, 8) == 129024  # 126 x 1024
    assert padded_vocab_size(50257, 1) == 50304


def test_sequence_parallel_is_off_without_tensor_parallelism():
    arch = load_model("llama-3.1-8b").architecture()
    args = megatron_args(arch, Mesh(gpus=8, sequence_parallel=True), seq_len=4096, micro_batch=1,
                         distributed_optimizer=False, recompute="selective")
    assert args.sequence_parallel is False
    assert theoretical_memory(args).activation_formula == "without_sp"


@pytest.mark.parametrize(("model", "mesh", "message"), [
    ("llama-3.1-8b", Mesh(gpus=12, tp=8), "--gpus 12 is not a multiple of tp x pp x cp = 8 x 1 x 1 = 8"),
    ("gpt2-xl", Mesh(gpus=8, tp=2), "num_attention_heads (25) is not a multiple of --tp 2"),
    ("llama-3.1-8b", Mesh(gpus=64, tp=64), "num_attention_heads (32) is not a multiple of --tp 64"),
    ("llama-3.1-70b", Mesh(gpus=128, tp=16), "num_key_value_heads (8) is not a multiple of --tp 16"),
    ("llama-3.1-8b", Mesh(gpus=24, pp=3), "--method megatron: 32 layers do not split evenly into --pp 3 stages"),
    ("llama-3.1-8b", Mesh(gpus=16, pp=2, vpp=3), "32 layers do not split evenly into --pp 2 x --vpp 3 = 6"),
    ("llama-3.1-8b", Mesh(gpus=8, vpp=2), "--vpp 2 interleaves pipeline stages and needs --pp 2 or more"),
    ("mixtral-8x7b", Mesh(gpus=48, ep=6), "num_experts (8) is not a multiple of --ep 6"),
    ("llama-3.1-8b", Mesh(gpus=8, ep=2), "--ep 2 divides experts, and llama has none"),
    ("mixtral-8x7b", Mesh(gpus=8, ep=8, etp=2), "--gpus 8 is not a multiple of etp x ep x pp = 2 x 8 x 1 = 16"),
    ("t5-3b", Mesh(gpus=8), "decoder-only GPT models; t5 is an encoder-decoder"),
])
def test_impossible_meshes_are_one_line_with_the_numbers(model, mesh, message):
    with pytest.raises(ZeroplanError) as caught:
        megatron_args(load_model(model).architecture(), mesh, seq_len=4096, micro_batch=1,
                      distributed_optimizer=False, recompute=None)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


# The command line: the same figures in the JSON, and what the formula does not read refused.

def _cli(runner, *argv: str):
    from zeroplan.cli.app import app

    return runner.invoke(app, ["estimate", "--method", "megatron", *argv])


def test_cli_json_carries_megatrons_bytes(runner):
    case = next(c for c in CASES if c["name"] == "llama-3.1-70b on 64 GPUs (tp 8, pp 2, sequence parallel)")
    result = _cli(runner, "--model", "llama-3.1-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--sequence-parallel",
                  "--checkpointing", "selective", "--grad-accum", "16", "--seq-len", "8192", "--stage", "1", "-f", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (only,) = doc["estimates"]
    assert only["use_distributed_optimizer"] is True
    assert only["weight_and_optimizer_bytes"] == round(case["weight_and_optimizer_bytes"])
    assert only["activation_bytes"] == round(case["activation_bytes"])
    assert only["activation_formula"] == "with_sp"
    assert doc["mesh"]["dp"] == 4 and doc["num_microbatches"] == 16
    assert doc["megatron_args"]["padded_vocab_size"] == 129024


def test_cli_without_stage_shows_both_optimizers(runner):
    result = _cli(runner, "--model", "llama-3.1-8b", "--gpus", "8", "-f", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["estimates"]
    assert [r["use_distributed_optimizer"] for r in rows] == [False, True]
    assert rows[1]["weight_and_optimizer_bytes"] < rows[0]["weight_and_optimizer_bytes"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "llama-3.1-8b", "--precision", "fp32"], "does not read --precision"),
    (["--model", "llama-3.1-8b", "--offload-optimizer", "cpu"], "does not read --offload-optimizer"),
    (["--params", "8e9"], "does not read --params"),
    (["--model", "llama-3.1-8b", "--stage", "3"], "--stage 3: Megatron's formula knows no ZeRO-3"),
    (["--model", "llama-3.1-8b", "--tp", "0"], "--tp '0' must be positive"),
    (["--model", "llama-3.1-8b", "--gpus", "8", "--pp", "3"], "--gpus 8 is not a multiple of tp x pp x cp"),
])
def test_cli_refuses_in_one_line(runner, argv, message):
    result = _cli(runner, *argv)
    assert result.exit_code != 0
    assert message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_deepspeeds_estimator_refuses_a_mesh_it_does_not_model(runner):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--tp", "2", "--sequence-parallel",
                                 "--method", "deepspeed"])
    assert result.exit_code == 2
    assert "--tp, --sequence-parallel: DeepSpeed's estimator functions know data parallelism only" in result.stderr
