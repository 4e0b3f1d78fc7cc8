"""--compile: what a compiled block saves (memory.activations.compiled) against validation/measure_compile.py's
measurement (validation/compile_measured.json: torch 2.13 inductor on CPU, bf16 Llama / Qwen3 / Mistral blocks)."""

import json
from pathlib import Path

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.activations.terms import ROTARY_TERM, embedding_terms
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
from zeroplan.models.families import parse_family_config

MEASURED = json.loads((Path(__file__).parent.parent / "validation" / "compile_measured.json").read_text())["rows"]


def _arch(row):
    config = {"model_type": row["family"], "hidden_size": row["hidden"], "num_attention_heads": row["heads"],
              "num_key_value_heads": row["kv_heads"], "intermediate_size": row["intermediate"], "num_hidden_layers": 1,
              "vocab_size": 256, "head_dim": row["hidden"] // row["heads"]}
    return parse_family_config(config, strict=False).architecture()


@pytest.mark.parametrize("row", MEASURED, ids=lambda r: f"{r['family']}-h{r['hidden']}-g{r['kv_heads']}-s{r['seq']}")
def test_a_compiled_layer_keeps_what_the_partitioner_saved(row):
    arch, setup = _arch(row), TrainingSetup(precision=Precision.bf16_mixed, seq_len=row["seq"], micro_batch=row["batch"])
    # The measured block also saves the rotary cos/sin it is handed, which zeroplan counts once, as an embedding term.
    rotary = dict(embedding_terms(arch, traits_of(arch), row["batch"], row["seq"], 2))[ROTARY_TERM]
    eager = activation_bytes(arch, setup).per_layer_bytes
    compiled = activation_bytes(arch, TrainingSetup(**{**_fields(setup), "compile": True})).per_layer_bytes
    assert eager + rotary == row["eager_bytes"]
    assert compiled + rotary == row["compiled_bytes"]


def _fields(setup):
    return {name: getattr(setup, name) for name in ("precision", "seq_len", "micro_batch")}


def test_the_compiled_estimate_names_its_source_and_drops_the_fp32_norm_copies_and_the_activation():
    arch = _arch(MEASURED[0])
    est = activation_bytes(arch, TrainingSetup(seq_len=128, micro_batch=2, compile=True))
    assert any("min-cut partitioner" in note and "GPU kernels may differ" in note for note in est.assumptions)
    assert "activation" not in dict((t.name, t.bytes) for t in est.layer_terms)
    assert est.layers_bytes == est.per_layer_bytes * arch.num_layers


@pytest.mark.parametrize("change, message", [
    ({"attention": Attention.eager}, "--attention flash"),
    ({"precision": Precision.fp32}, "16-bit compute dtype"),
])
def test_compile_refuses_what_was_not_measured(change, message):
    with pytest.raises(ZeroplanError, match=message):
        activation_bytes(_arch(MEASURED[0]), TrainingSetup(compile=True, **change))


def test_compile_refuses_an_unmeasured_family_naming_it(runner):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "gemma2-9b", "--compile"])
    assert result.exit_code == 1 and "not gemma2" in result.stderr


def test_compile_refuses_a_mesh_and_the_peer_estimators(runner):
    import zeroplan
    from zeroplan.cli.app import app

    for extra in (["--tp", "2"], ["--method", "deepspeed"]):
        result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--compile", *extra])
        assert result.exit_code == 2 and "--compile" in result.stderr and result.stderr.count("\n") == 1
    with pytest.raises(ZeroplanError, match="--compile: modelled on data parallelism only"):
        zeroplan.estimate(model="llama-3.1-8b", compile=True, tp=2)


def test_the_api_and_the_cli_give_the_same_compiled_estimate(runner):
    import zeroplan
    from zeroplan.cli.app import app

    api = zeroplan.estimate(model="llama-3.1-8b", stage=3, gpus=8, compile=True)
    cli = json.loads(runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "--stage", "3", "-g", "8", "--compile",
                                         "-f", "json"]).stdout)
    assert zeroplan.to_dict(api)["stages"] == cli["stages"]
    assert api.stage(3).headroom_bytes > zeroplan.estimate(model="llama-3.1-8b", stage=3, gpus=8).stage(3).headroom_bytes
