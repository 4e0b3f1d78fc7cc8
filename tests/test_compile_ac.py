"""--compile under checkpointing (memory.activations.compiled.compiled_layer) against validation/measure_compile_ac.py's
measurement (validation/compile_ac_measured.json: torch 2.13 inductor on CPU, bf16 Llama / Qwen2 / Qwen3 / Mistral
blocks wrapped in torchtitan's checkpoint wrapper, then compiled)."""

import json
from pathlib import Path

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.activations.compiled import (
    COMPILE_AC_ASSUMPTION,
    INPUT_SITE,
    KERNEL_SITE,
    compiled_layer,
)
from zeroplan.memory.activations.terms import ROTARY_TERM, embedding_terms
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.setup import Checkpointing, Precision, TrainingSetup
from zeroplan.models.families import parse_family_config

DATA = json.loads((Path(__file__).parent.parent / "validation" / "compile_ac_measured.json").read_text())
MODES = {"none": Checkpointing.none, "full": Checkpointing.full, "selective-op": Checkpointing.selective_op}
# The measured backward high-water of a checkpointed block differs from the no-checkpointing block's by other than the
# modelled rebuild: the recompute also makes h-wide tensors outside the saved set (the o projection's output, the
# residual sum, the down projection's output, the block's output: 4 of e T h), alive as inductor's schedule orders
# them; Granite scales each branch's output by residual_multiplier before its addition (transformers==5.25.0
# models/granite/modeling_granite.py lines 275, 280): 2 more. Eager full checkpointing, modelled the same way,
# differs likewise (the eager rows, same run). In e T h units.
RECOMPUTE_TRANSIENTS = 4
SCALED_RESIDUAL_TRANSIENTS = {"granite": 6}
RUNS = [(row, run) for row in DATA["rows"] for run in row["runs"] if run["backend"] == "inductor"]


def _arch(row):
    config = {"model_type": row["family"], "hidden_size": row["hidden"], "num_attention_heads": row["heads"],
              "num_key_value_heads": row["kv_heads"], "intermediate_size": row["intermediate"], "num_hidden_layers": 1,
              "vocab_size": 256, "head_dim": row["hidden"] // row["heads"]}
    return parse_family_config(config, strict=False).architecture()


def _rotary(row):
    arch = _arch(row)
    return dict(embedding_terms(arch, traits_of(arch), row["batch"], row["seq"], 2))[ROTARY_TERM]


def _id(item):
    row, run = item
    return f"{row['family']}-h{row['hidden']}-g{row['kv_heads']}-s{row['seq']}-b{row['batch']}-{run['mode']}"


def _transients(row):
    return SCALED_RESIDUAL_TRANSIENTS.get(row["family"], RECOMPUTE_TRANSIENTS) * 2 * row["batch"] * row["seq"] * row["hidden"]


def _layer(row, mode):
    return compiled_layer(_arch(row), row["batch"], row["seq"], 2, MODES[mode])


@pytest.mark.parametrize("item", RUNS, ids=_id)
def test_a_compiled_block_keeps_what_the_partitioner_saved_under_each_checkpointing(item):
    row, run = item
    # The block also saves the rotary cos/sin it is handed, which zeroplan counts once, as an embedding term.
    assert _layer(row, run["mode"]).kept_bytes + _rotary(row) == run["saved_bytes"]


@pytest.mark.parametrize("item", [i for i in RUNS if i[1]["mode"] != "none"], ids=_id)
def test_the_modelled_rebuild_meets_the_measured_backward_within_the_gap(item):
    row, run = item
    none = next(r for r in row["runs"] if r["backend"] == "inductor" and r["mode"] == "none")
    one, plain = _layer(row, run["mode"]), _layer(row, "none")
    measured = run["bwd_peak_bytes"] - none["bwd_peak_bytes"]  # what this mode's backward holds beyond none's
    modelled = one.kept_bytes + one.recompute - plain.kept_bytes
    assert abs(measured - modelled) <= _transients(row)


def test_the_eager_recompute_misses_transients_of_the_same_size():
    """The reason for RECOMPUTE_TRANSIENTS: eager's full checkpointing, which zeroplan models the same way, measured in the
    same run, also holds more in backward than the no-checkpointing block."""
    for row in DATA["rows"]:
        eager = {r["mode"]: r for r in row["runs"] if r["backend"] == "eager"}
        gap = eager["full"]["bwd_peak_bytes"] - eager["none"]["bwd_peak_bytes"]
        assert 0 < gap <= _transients(row)


def test_full_keeps_the_input_and_selective_op_only_what_its_backward_reads():
    row = DATA["rows"][0]
    full, sac = _layer(row, "full"), _layer(row, "selective-op")
    tokens_h = 2 * row["batch"] * row["seq"] * row["hidden"]
    assert full.kept == ((INPUT_SITE, tokens_h),)
    names = [name for name, _ in sac.kept]
    # torchtitan's every-other-mm rule keeps q, v, gate and down; the compiled backward never reads down's output
    assert names == [INPUT_SITE, "q projection output", "v projection output", "gate projection output", KERNEL_SITE]
    assert full.kept_bytes + full.recompute == sac.kept_bytes + sac.recompute - dict(sac.kept)["q projection output"]


def _setup(**kw):
    return TrainingSetup(precision=Precision.bf16_mixed, seq_len=128, micro_batch=2, compile=True, **kw)


def test_the_stack_under_full_keeps_inputs_and_recomputes_one_compiled_layer():
    arch = _arch(DATA["rows"][0])
    est = activation_bytes(arch, _setup(checkpointing=Checkpointing.full))
    assert est.layer_bytes == (2 * 2 * 128 * arch.hidden_size,) * arch.num_layers and est.held_bytes == 0
    assert COMPILE_AC_ASSUMPTION in est.assumptions
    eager = activation_bytes(arch, TrainingSetup(precision=Precision.bf16_mixed, seq_len=128, micro_batch=2,
                                                 checkpointing=Checkpointing.full))
    assert 0 < est.recompute_bytes + est.loss_transient_bytes < eager.recompute_bytes + eager.loss_transient_bytes


def test_every_n_checkpoints_every_nth_compiled_layer():
    config = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
              "intermediate_size": 688, "num_hidden_layers": 4, "vocab_size": 256}
    arch = parse_family_config(config, strict=False).architecture()
    each = activation_bytes(arch, _setup(checkpointing=Checkpointing.full, checkpoint_every=2)).layer_bytes
    none = compiled_layer(arch, 2, 128, 2, Checkpointing.none).kept_bytes
    assert each == (none, 2 * 2 * 128 * 256, none, 2 * 2 * 128 * 256)


def test_qwen3_selective_op_is_modelled_compiled_though_not_eager():
    arch = _arch(next(r for r in DATA["rows"] if r["family"] == "qwen3"))
    with pytest.raises(ZeroplanError, match="selective-op"):
        activation_bytes(arch, TrainingSetup(checkpointing=Checkpointing.selective_op))
    assert activation_bytes(arch, _setup(checkpointing=Checkpointing.selective_op)).per_layer_bytes > 0


def test_compile_under_checkpointing_refuses_an_unmeasured_family_in_one_line(runner):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "gemma2-9b", "--compile", "--checkpointing", "selective-op"])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "not gemma2" in result.stderr


def test_the_cli_peak_falls_with_compiled_checkpointing(runner):
    from zeroplan.cli.app import app

    def peak(*extra):
        out = runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "--stage", "3", "-g", "8", "--seq-len", "8192",
                                  "--checkpointing", "selective-op", *extra, "-f", "json"])
        assert out.exit_code == 0, out.stderr
        doc = json.loads(out.stdout)
        (stage,) = [s for s in doc["stages"] if s["stage"] == 3]
        return stage["gpu_bytes"]["total"], doc["assumptions"]

    eager, notes = peak()
    compiled, compiled_notes = peak("--compile")
    assert compiled < eager
    assert COMPILE_AC_ASSUMPTION in compiled_notes and COMPILE_AC_ASSUMPTION not in notes
