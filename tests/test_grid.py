"""The configuration grid: every row is evaluate()'s answer for its configuration; axes, counts, CLI output."""

from __future__ import annotations

import csv
import io
import json
import random
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest

from zeroplan.cli.app import app
from zeroplan.cli.sweep import GridArgs, grid_axes, parse_axis
from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.memory.estimate import Scenario, evaluate, overheads_for
from zeroplan.memory.grid import (
    GridRow,
    best_per_stage,
    offload_pairs,
    split_gpu_counts,
    sweep_grid,
)
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    OffloadDevice,
    Parallelism,
    ZeroStage,
)
from zeroplan.memory.states import ModelSummary
from zeroplan.models.architecture import Architecture

H100 = load_hardware("h100-sxm-80gb")
ALL_OFFLOADS = offload_pairs(OffloadDevice, OffloadDevice)
ARCH = Architecture(  # Llama-2-7B's shape; only the (fake) activation model below reads it
    family="llama", hidden_size=4096, num_layers=32, num_attention_heads=32, num_key_value_heads=32, head_dim=128,
    intermediate_size=11008, vocab_size=32000, gated_mlp=True, norm="rmsnorm", tie_word_embeddings=False,
)
GRID_MODES = (Checkpointing.none, Checkpointing.selective, Checkpointing.full)  # selective-op: Llama-like only
CKPT_FACTOR = {Checkpointing.none: 34, Checkpointing.selective: 20, Checkpointing.full: 2}


def scenario(**update) -> Scenario:
    model = ModelSummary(name="7B", num_params=6_738_415_616, largest_layer_params=131_072_000,
                         num_embedding_params=262_144_000, small_param_numel=8_458_240)
    base = Scenario(model=model, hardware=H100, overheads=overheads_for(H100, None, None, None))
    return replace(base, **update)


@pytest.fixture
def fake_activations(monkeypatch):
    """An activation model with the interface estimate.activations_for calls (zeroplan.activations)."""
    def activation_bytes(arch, setup):
        per_layer = setup.seq_len * setup.micro_batch * arch.hidden_size * CKPT_FACTOR[setup.checkpointing]
        return SimpleNamespace(total_bytes=per_layer * arch.num_layers, assumptions=())

    monkeypatch.setitem(sys.modules, "zeroplan.memory.activations", SimpleNamespace(activation_bytes=activation_bytes))


def expected_row(scn: Scenario, row: GridRow) -> GridRow:
    """What evaluate() says for the row's configuration, built without the grid's code."""
    at = replace(
        scn,
        setup=replace(scn.setup, micro_batch=row.micro_batch, checkpointing=Checkpointing(row.checkpointing)),
        parallelism=Parallelism(gpus=row.gpus, nodes=row.nodes),
        knobs=replace(scn.knobs, offload_optimizer=OffloadDevice(row.offload_optimizer),
                      offload_param=OffloadDevice(row.offload_param)),
    )
    est = evaluate(at, ZeroStage(row.stage))
    return GridRow(int(est.stage), row.gpus, row.nodes, row.micro_batch, row.checkpointing, est.offload_optimizer.value,
                   est.offload_param.value, est.total, est.states.total, est.activations_at_peak, est.buffers_at_peak,
                   est.overhead_bytes, est.fits, est.headroom_bytes)


def full_grid(scn: Scenario) -> list[GridRow]:
    return sweep_grid(scn, tuple(ZeroStage), (1, 2, 8, 16, 64), (1, 2, 7, 32), GRID_MODES, ALL_OFFLOADS)


@pytest.mark.parametrize("knobs", [DeepSpeedKnobs(), DeepSpeedKnobs(overlap_comm=True, zero_hpz_partition_size=8,
                                                                   stage3_prefetch_bucket_size=0)],
                         ids=["deepspeed-defaults", "overlap-hpz-no-prefetch"])
def test_sampled_rows_equal_evaluate_exactly(fake_activations, knobs):
    scn = scenario(arch=ARCH, knobs=knobs)
    rows = full_grid(scn)
    for row in random.Random(0).sample(rows, 150):
        assert row == expected_row(scn, row)


def test_rows_equal_evaluate_without_hardware_or_architecture():
    scn = scenario(hardware=None, overheads=None)
    rows = full_grid(scn)
    for row in random.Random(1).sample(rows, 60):
        assert row == expected_row(scn, row)
    assert {r.fits for r in rows} == {None} and {r.activations_bytes for r in rows} == {0}


def test_lines_sum_to_total(fake_activations):
    for row in full_grid(scenario(arch=ARCH)):
        assert row.model_states_bytes + row.activations_bytes + row.buffers_bytes + row.overhead_bytes == row.total_bytes


def test_rows_match_a_preset_estimate_with_the_real_activation_model():
    pytest.importorskip("zeroplan.memory.activations")
    from zeroplan.scenario import ScenarioArgs
    from zeroplan.scenario import scenario as build

    scn = build(ScenarioArgs(model="llama-2-7b"))
    rows = sweep_grid(scn, (ZeroStage.zero1, ZeroStage.zero3), (8,), (1, 4), GRID_MODES, [(OffloadDevice.none,) * 2])
    assert [row == expected_row(scn, row) for row in rows] == [True] * 12


def test_count_and_order_leave_out_offloads_a_stage_does_not_apply():
    rows = full_grid(scenario())
    # valid (optimizer, param) offloads: ZeRO-0 none; ZeRO-1/2 none, cpu; ZeRO-3 all nine
    assert len(rows) == (1 + 2 + 2 + 9) * 5 * 4 * 3
    by_stage = {s: {(r.offload_optimizer, r.offload_param) for r in rows if r.stage == s} for s in range(4)}
    assert by_stage[0] == {("none", "none")}
    assert by_stage[1] == by_stage[2] == {("none", "none"), ("cpu", "none")}
    assert len(by_stage[3]) == 9
    assert [r.stage for r in rows] == sorted(r.stage for r in rows)
    assert [r.micro_batch for r in rows[:4]] == [1, 2, 7, 32]
    assert (rows[0].checkpointing, rows[4].checkpointing) == ("none", "selective")


def test_micro_batch_and_checkpointing_change_only_the_activations(fake_activations):
    rows = sweep_grid(scenario(arch=ARCH), (ZeroStage.zero2,), (8,), (1, 2), GRID_MODES, [(OffloadDevice.none,) * 2])
    assert len({r.model_states_bytes for r in rows}) == 1
    tokens_layers_width = 2048 * 32 * 4096
    modelled = [tokens_layers_width * f * mb for f in (34, 20, 2) for mb in (1, 2)]
    # Activations show where they are alive at the peak; small ones leave the optimizer step as the peak.
    assert [r.activations_bytes for r in rows] == [a if r.activations_bytes else 0 for a, r in zip(modelled, rows)]
    assert rows[0].activations_bytes == modelled[0] and rows[-1].activations_bytes == 0


@pytest.mark.parametrize(("gpus", "per_node", "nodes"), [(1, 8, 1), (8, 8, 1), (16, 8, 2), (12, 8, 2), (1024, 8, 128)])
def test_gpu_counts_go_on_the_fewest_nodes(gpus, per_node, nodes):
    assert split_gpu_counts([gpus], per_node) == ([Parallelism(gpus=gpus, nodes=nodes)], ())


def test_gpu_counts_that_do_not_split_evenly_are_set_apart():
    assert split_gpu_counts([8, 9, 13, 16], 8) == ([Parallelism(gpus=8, nodes=1), Parallelism(gpus=16, nodes=2)], (9, 13))


def test_best_per_stage_prefers_fewer_gpus_then_no_offload_then_less_recompute_then_larger_batch():
    def row(stage, gpus, mb, ckpt="none", opt="none", fits=True):
        return GridRow(stage, gpus, 1, mb, ckpt, opt, "none", 1, 1, 0, 0, 0, fits, 0)

    rows = [row(1, 8, 4), row(1, 4, 1, "full"), row(1, 4, 2, "full"), row(1, 4, 8, "none", "cpu"), row(1, 2, 64, fits=False),
            row(2, 1, 1, fits=False)]
    assert best_per_stage(rows) == {1: row(1, 4, 2, "full"), 2: None}


@pytest.mark.parametrize(("text", "values"), [("1", (1,)), ("1,2,4-8", (1, 2, 4, 5, 6, 7, 8)), ("8,1,8", (1, 8)),
                                              (" 2 - 3 ", (2, 3)), ("1e3", (1000,)), ("1-2,8-32:8", (1, 2, 8, 16, 24, 32)),
                                              ("4-10:4", (4, 8))])
def test_parse_axis(text, values):
    assert parse_axis(text, "--gpu-counts") == values


@pytest.mark.parametrize(("args", "message"), [
    ({"stages": "4"}, "--stages '4' is not a ZeRO stage"),
    ({"micro_batches": "0"}, "must be positive"),
    ({"micro_batches": "8-2"}, "must run upwards"),
    ({"gpu_counts": "1-1e9"}, "at most 100,000 values"),
    ({"gpu_counts": "8-64:0"}, "step '0' must be positive"),
    ({"checkpointings": "none,fool"}, "'fool' is not one of none, selective, selective-op, full"),
    ({"micro_batches": "1-100000", "gpu_counts": "1-64"}, "narrow an axis"),
])
def test_bad_axes(args, message):
    with pytest.raises(ZeroplanError, match=message):
        grid_axes(GridArgs(**args))


def test_axes_defaults_and_enum_order():
    axes = grid_axes(GridArgs(stages="3,0", offload_params="nvme,none"))
    assert axes.stages == (ZeroStage.zero0, ZeroStage.zero3)
    assert axes.offload_params == (OffloadDevice.none, OffloadDevice.nvme)
    assert axes.micro_batches == tuple(range(1, 17))


GRID = ["sweep", "--params", "7e9", "--gpu-counts", "1,8,16", "--micro-batches", "1-3", "--checkpointing", "none,full"]


def test_cli_csv_parses_one_row_per_configuration(runner):
    res = runner.invoke(app, [*GRID, "-f", "csv"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert list(rows[0]) == list(GridRow._fields)
    assert len(rows) == (1 + 2 + 2 + 9) * 3 * 3 * 2
    assert {r["fits"] for r in rows} <= {"true", "false"}
    first = rows[0]
    assert int(first["total_bytes"]) == sum(int(first[k]) for k in ("model_states_bytes", "activations_bytes",
                                                                     "buffers_bytes", "overhead_bytes"))


def test_cli_json_holds_axes_best_and_every_row(runner):
    res = runner.invoke(app, [*GRID, "-f", "json"])
    data = json.loads(res.stdout)
    assert data["num_configurations"] == len(data["rows"]) == 252
    assert data["axes"]["gpu_counts"] == [1, 8, 16] and data["axes"]["checkpointing"] == ["none", "full"]
    assert set(data["rows"][0]) == set(GridRow._fields)
    assert all(type(r["total_bytes"]) is int for r in data["rows"])
    assert set(data["best"]) == {"0", "1", "2", "3"}
    assert data["best"]["3"]["fits"] is True


def test_cli_table_and_errors(runner):
    res = runner.invoke(app, GRID)
    assert res.exit_code == 0 and "ZeRO-3" in res.stdout and "cheapest fitting" in res.stdout
    bad = runner.invoke(app, [*GRID, "--stages", "5"])
    assert bad.exit_code == 1 and "not a ZeRO stage" in bad.stderr and "Traceback" not in bad.output
    none = runner.invoke(app, [*GRID, "--hardware", "none", "-f", "csv"])
    assert none.exit_code == 0 and none.stdout.splitlines()[1].endswith(",,"), "fits and headroom unknown: empty"


def test_sweep_skips_the_gpu_counts_that_do_not_split_over_nodes_and_says_so(runner):
    from zeroplan.cli.app import app

    text = runner.invoke(app, ["sweep", "--params", "9e9", "--gpu-counts", "1-16", "--micro-batches", "1"])
    assert text.exit_code == 0 and "skipped GPU counts 9, 11, 13, 15: they do not split evenly over nodes of 8" in text.stdout
    data = json.loads(runner.invoke(app, ["sweep", "--params", "9e9", "--gpu-counts", "1-16", "--micro-batches", "1",
                                          "-f", "json"]).stdout)
    assert data["skipped_gpu_counts"] == [9, 11, 13, 15] and {r["gpus"] for r in data["rows"]} == {*range(1, 9), 10, 12, 14, 16}
    none = runner.invoke(app, ["sweep", "--params", "9e9", "--gpu-counts", "9"])
    assert none.exit_code == 1 and "none of the GPU counts (9) splits evenly over nodes of 8" in none.stderr


def test_streamed_rows_are_made_as_they_are_read():
    from zeroplan.memory.grid import GridAxes, stream_axes, sweep_axes

    scn = scenario()
    axes = GridAxes((ZeroStage.zero3,), (8, 16), (1, 2), (Checkpointing.none,), (OffloadDevice.none,), (OffloadDevice.none,))
    rows = stream_axes(scn, axes).rows
    assert not isinstance(rows, list) and next(rows).gpus == 8  # an iterator: nothing is held beyond the row read
    assert sweep_axes(scn, axes).rows[1:] == list(rows)


def test_a_direct_grid_call_refuses_a_count_that_does_not_split():
    with pytest.raises(ZeroplanError, match="13 GPUs do not split evenly over the 2 nodes of 8 they need"):
        sweep_grid(scenario(), [ZeroStage.zero3], [13], [1], [Checkpointing.none], [(OffloadDevice.none, OffloadDevice.none)])


@pytest.mark.parametrize("options", [
    {"lora_rank": "16", "lora_targets": "all-linear"},
    {"qlora": True, "double_quant": True, "quant_storage": "bfloat16", "lora_rank": "8"},
    {"freeze": "model.embed_tokens.*,model.layers.0.*", "optimizer": "paged-adamw-8bit"},
    {"optimizer": "paged-adamw"},
], ids=["lora", "qlora", "freeze-paged", "paged"])  # fmt: skip
def test_a_fine_tune_s_rows_equal_evaluate_exactly(options):
    """The grid under the fine-tuning options: memory.tuned's and memory.paged's bases, as evaluate() builds them."""
    from zeroplan.scenario import ScenarioArgs
    from zeroplan.scenario import scenario as build

    scn = build(ScenarioArgs(model="llama-3.1-8b", **options))
    rows = sweep_grid(scn, tuple(ZeroStage), (1, 8, 16), (1, 4), GRID_MODES, ALL_OFFLOADS)
    assert rows and all(row == expected_row(scn, row) for row in rows)


def test_sweep_leaves_out_the_stages_a_qlora_base_cannot_run_at(runner):
    res = runner.invoke(app, ["sweep", "-m", "llama-3.1-8b", "--qlora", "--lora-rank", "8", "--gpu-counts", "1,8",
                              "--micro-batches", "1", "-f", "json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {row["stage"] for row in doc["rows"]} == {0, 1, 2}
    assert doc["refused_stages"] == ["stage 3 left out: --quant-storage uint8 under ZeRO-3: QLoRA there needs the "
                                     "packed weights stored in the compute dtype, --quant-storage bfloat16"]
    assert doc["finetune"]["mode"] == "QLoRA" and doc["finetune"]["num_trainable_params"] == 3_407_872  # r 8 on q, v: peft's count (docs/finetune.md)
