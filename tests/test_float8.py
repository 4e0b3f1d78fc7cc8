"""--float8: torchao Float8Linear's cast transients and a compiled block's saved set (memory.float8) against
validation/measure_float8.py (validation/float8_measured.json: torch 2.13, torchao 0.18.0, CPU), the float8
all-gather's bytes under FSDP2, and the refusals."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.activations.terms import ROTARY_TERM, embedding_terms
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.float8 import (
    CAST_PEAK,
    Float8Recipe,
    cast_transients,
    compiled_transients,
    layer_linears,
    layer_transients,
)
from zeroplan.memory.setup import Checkpointing, Precision, TrainingSetup
from zeroplan.models.families import parse_family_config

MEASURED = json.loads((Path(__file__).parent.parent / "validation" / "float8_measured.json").read_text())
RECIPE = {"tensorwise": Float8Recipe.tensorwise, "rowwise": Float8Recipe.rowwise,
          "rowwise_with_gw_hp": Float8Recipe.rowwise_with_gw_hp}


def _arch(row, **more):
    config = {"model_type": row["family"], "hidden_size": row["hidden"], "num_attention_heads": row["heads"],
              "num_key_value_heads": row["kv_heads"], "intermediate_size": row["intermediate"], "num_hidden_layers": 1,
              "vocab_size": 256, "head_dim": row["hidden"] // row["heads"], **more}
    return parse_family_config(config, strict=False).architecture()


@pytest.mark.parametrize("row", MEASURED["linears"], ids=lambda r: f"{r['recipe']}-{r['tokens']}x{r['in']}x{r['out']}")
def test_the_cast_transients_are_the_measured_ones(row):
    got = cast_transients(RECIPE[row["recipe"]], row["tokens"], row["in"], row["out"], 2)
    assert (got.forward, got.backward) == (row["fwd"], row["bwd"])
    assert row["saved_float8"] == row["saved_linear"]  # Float8Linear saves the bf16 input, as nn.Linear does


@pytest.mark.parametrize("row", MEASURED["blocks"], ids=lambda r: f"{r['recipe']}-h{r['hidden']}-g{r['kv_heads']}")
def test_a_block_saves_what_was_measured_eager_and_compiled(row):
    arch = _arch(row)
    setup = TrainingSetup(precision=Precision.bf16_mixed, seq_len=row["seq"], micro_batch=row["batch"],
                          float8=RECIPE[row["recipe"]])
    rotary = dict(embedding_terms(arch, traits_of(arch), row["batch"], row["seq"], 2))[ROTARY_TERM]
    assert activation_bytes(arch, setup).per_layer_bytes + rotary == row["eager_bytes"]
    assert activation_bytes(arch, replace(setup, compile=True)).per_layer_bytes + rotary == row["compiled_bytes"]


def test_eager_float8_keeps_the_bf16_saved_set_and_adds_only_transients():
    arch = _arch(MEASURED["blocks"][0])
    plain = activation_bytes(arch, TrainingSetup(seq_len=128, micro_batch=2))
    f8 = activation_bytes(arch, TrainingSetup(seq_len=128, micro_batch=2, float8=Float8Recipe.rowwise))
    assert f8.total_bytes == plain.total_bytes and plain.float8_forward_bytes == plain.float8_backward_bytes == 0
    each = [cast_transients(Float8Recipe.rowwise, 256, k, n, 2) for _, k, n in layer_linears(arch)]
    assert f8.float8_forward_bytes == max(t.forward for t in each)
    assert f8.float8_backward_bytes == max(t.backward for t in each)
    assert any("Float8Linear rowwise" in note and "torchao==0.18.0" in note for note in f8.assumptions)


def test_a_cast_peaks_at_nine_bytes_an_element_and_rowwise_adds_a_scale_per_row():
    big_input = cast_transients(Float8Recipe.tensorwise, 4096, 64, 16, 2)  # the input's cast is the forward's peak
    assert big_input.forward == CAST_PEAK * 4096 * 64 + 4 - 2 * 4096 * 16
    rowwise = cast_transients(Float8Recipe.rowwise, 4096, 64, 16, 2)
    assert rowwise.forward - big_input.forward == 4 * (4096 - 1)  # one fp32 scale per input row, not one


def test_linears_torchtitan_would_not_convert_are_left_out():
    arch = _arch({"family": "llama", "hidden": 256, "heads": 4, "kv_heads": 4, "intermediate": 690})  # 690 % 16
    assert {name for name, _, _ in layer_linears(arch)} == {"q", "k", "v", "o"}


def test_compiled_transients_are_the_float8_operands_only():
    got = compiled_transients(Float8Recipe.tensorwise, 1024, 256, 512)
    assert got.forward == 1024 * 256 + 512 * 256 + 8
    assert got.backward == 2 * 1024 * 512 + 512 * 256 + 1024 * 256 + 16
    arch = _arch(MEASURED["blocks"][0])
    setup = TrainingSetup(seq_len=128, micro_batch=2, float8=Float8Recipe.tensorwise)
    assert layer_transients(arch, replace(setup, compile=True), 256, 2).backward < layer_transients(arch, setup, 256, 2).backward


def test_a_transient_lands_on_layer_events_only():
    from zeroplan.memory.timeline import ActivationProfile, Moment, _activations

    prof = ActivationProfile(float8_forward=100, float8_backward=1000)
    moment = Moment("forward of layer 0", "forward", 0, 0, 0, 0, 0)
    assert _activations(moment, prof, 0) == 100
    assert _activations(replace(moment, phase="backward"), prof, 0) == 1000
    assert _activations(replace(moment, layer=None, phase="backward"), prof, 0) == 0
    recomputing = ActivationProfile(float8_forward=1000, float8_backward=100)  # the recomputed forward casts too
    assert _activations(replace(moment, phase="backward", recompute=True), recomputing, 0) == 1000
    assert _activations(replace(moment, phase="backward"), recomputing, 0) == 100


@pytest.mark.parametrize("change, message", [
    ({"precision": Precision.fp32}, "16-bit compute dtype"),
])
def test_float8_refuses_what_it_does_not_model(change, message):
    with pytest.raises(ZeroplanError, match=message):
        activation_bytes(_arch(MEASURED["blocks"][0]), TrainingSetup(float8=Float8Recipe.tensorwise, **change))


def test_float8_refuses_moe_naming_the_family():
    from zeroplan.models.presets import load_model

    arch = load_model("mixtral-8x7b").architecture()
    with pytest.raises(ZeroplanError, match="--float8: modelled for dense"):
        activation_bytes(arch, TrainingSetup(float8=Float8Recipe.tensorwise))


def test_float8_with_checkpointing_keeps_the_checkpointed_saved_set():
    arch = _arch(MEASURED["blocks"][0])
    for ckpt in (Checkpointing.full, Checkpointing.selective_op):
        plain = activation_bytes(arch, TrainingSetup(checkpointing=ckpt))
        assert activation_bytes(arch, TrainingSetup(checkpointing=ckpt, float8=Float8Recipe.tensorwise)).total_bytes \
            == plain.total_bytes


@pytest.mark.torch
def test_the_harness_measures_one_linear_as_modelled():
    pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from validation.measure_float8 import measure_linear

    row = measure_linear("rowwise", 64, 32, 48)
    assert (row["fwd"], row["bwd"]) == (row["model_fwd"], row["model_bwd"])


@pytest.mark.parametrize("row", MEASURED["gathers"], ids=lambda r: f"dp{r['world']}-d{r['width']}-f{r['inner']}")
def test_fsdp2_gathers_a_block_as_measured_bf16_and_float8(row):
    from zeroplan.memory.engines.fsdp import unit_bytes

    block = ((row["width"],), (row["inner"], row["width"]), (row["width"], row["inner"]))
    assert unit_bytes(block, row["world"], 2) == row["bf16_unsharded"] == row["bf16_all_gather_outputs"]
    # the unsharded float8 weights are the all-gather outputs (1 B an element) plus one fp32 scale each
    assert unit_bytes(block, row["world"], 2, float8=True) == row["float8_unsharded"] == row["float8_all_gather_outputs"] + 8


def test_float8_all_gather_shrinks_fsdp2_gathered_blocks_not_the_root_or_gradients():
    from zeroplan.api import estimate

    base = dict(model="llama-3.1-8b", gpus=8, engine="fsdp2", stage=3, seq_len=2048, float8="tensorwise")
    plain, f8 = estimate(**base), estimate(**base, float8_all_gather=True)
    terms = {name: {t.name.split(" (")[0]: t.bytes for t in est.stages[0].buffers} for name, est in (("p", plain), ("f", f8))}
    block = 4096 * (4096 * 2 + 1024 * 2 + 14336 * 3)  # llama-3.1-8b's linears per block
    assert terms["p"]["gathered parameters"] - terms["f"]["gathered parameters"] == block - 7 * 4  # 2 B -> 1 B + scale
    assert terms["p"]["unsharded gradient"] == terms["f"]["unsharded gradient"]
    assert any(s.name == "float8 all-gather" for s in f8.stages[0].base.settings)


def test_float8_all_gather_is_refused_without_tensorwise_or_outside_fsdp2():
    from zeroplan.api import estimate

    with pytest.raises(ZeroplanError, match="--float8 tensorwise"):
        estimate(model="llama-3.1-8b", gpus=8, engine="fsdp2", float8="rowwise", float8_all_gather=True)
    with pytest.raises(ZeroplanError, match="FSDP2's"):
        estimate(model="llama-3.1-8b", gpus=8, engine="fsdp", stage=3, float8="tensorwise", float8_all_gather=True)


def test_each_layer_event_of_the_step_holds_the_transient_and_no_other_event_does():
    from zeroplan.api import estimate

    base = dict(model="llama-3.1-8b", gpus=8, engine="fsdp2", stage=3, seq_len=4096, checkpointing="full")
    plain, f8 = estimate(**base).stages[0].timeline, estimate(**base, float8="tensorwise").stages[0].timeline
    acts = estimate(**base, float8="tensorwise").activations
    for a, b in zip(plain.events, f8.events, strict=True):
        backward = max(acts.float8_backward_bytes, acts.float8_forward_bytes)  # full checkpointing recomputes forwards
        want = {"forward": acts.float8_forward_bytes, "backward": backward}.get(a.phase, 0)
        assert b.total - a.total == (want if a.layer is not None else 0), a.name


@pytest.mark.parametrize("row", MEASURED["peaks"], ids=lambda r: f"h{r['hidden']}-f{r['intermediate']}")
def test_a_compiled_float8_blocks_backward_peak_is_within_five_percent_of_the_model(row):
    """Over the bf16 compiled block: the saved set's difference plus the float8 backward transient (docs/float8.md)."""
    arch = _arch(row)
    setup = TrainingSetup(precision=Precision.bf16_mixed, seq_len=row["seq"], micro_batch=row["batch"], compile=True)
    bf16, f8 = activation_bytes(arch, setup), activation_bytes(arch, replace(setup, float8=Float8Recipe.tensorwise))
    rotary = dict(embedding_terms(arch, traits_of(arch), row["batch"], row["seq"], 2))[ROTARY_TERM]
    assert f8.per_layer_bytes + rotary == row["float8_saved"] and bf16.per_layer_bytes + rotary == row["bf16_saved"]
    model = f8.per_layer_bytes - bf16.per_layer_bytes + f8.float8_backward_bytes
    measured = row["float8_bwd_peak"] - row["bf16_bwd_peak"]
    assert abs(measured - model) <= 0.05 * row["float8_bwd_peak"]
