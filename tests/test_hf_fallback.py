"""The zeroplan[hf] extra never ends in a traceback (issue 25): Gemma 4's per-layer attributes, a meta forward that
cannot run (Gemma 4's per-layer inputs cut by the shallow copy), configs transformers refuses, progress while torch
loads; and DeepSeek-V3.2, whose indexer's forward meta cannot run, described by zeroplan.

A model whose forward cannot run on the meta device keeps transformers' exact count and gets its activations from
the formulas of its nearest described block (zeroplan.models.hf.nearest), the output saying so.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zeroplan.cli.app import app
from zeroplan.errors import SpecError
from zeroplan.memory.setup import TrainingSetup
from zeroplan.models import hf
from zeroplan.models.families import parse_family_config

pytestmark = pytest.mark.torch

GEMMA4 = {"model_type": "gemma4", "text_config": {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32, "vocab_size": 1000, "sliding_window": 16,
    "vocab_size_per_layer_input": 1000, "hidden_size_per_layer_input": 8}}
DEEPSEEK_V32 = {"model_type": "deepseek_v32", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
                "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
                "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
                "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
                "n_group": 1, "topk_group": 1, "index_n_heads": 2, "index_head_dim": 16, "index_topk": 8}


@pytest.fixture(scope="module")
def build():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from zeroplan.models.hf import build

    return build


def _file(tmp_path: Path, data: dict, name: str) -> Path:
    (tmp_path / name).mkdir()
    path = tmp_path / name / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_gemma4_per_layer_head_dim_is_counted_and_said(build, tmp_path, runner):
    """transformers' own count of Gemma 4 says its head_dim differs by layer; the CLI reads gemma4 with zeroplan's
    own reader now (models/families/gemma4.py), whose count is transformers' and whose activations are formulas."""
    from zeroplan.models.params import count_params

    counted = build.describe(json.loads(json.dumps(GEMMA4)), "gemma4-tiny")
    assert counted.arch.head_dim == 16  # the sliding layers' (5 of 6), not the global layer's 32
    assert any("head_dim differs by layer (16 in 5, 32 in 1 layers)" in n for n in counted.notes), counted.notes
    ours = count_params(parse_family_config(json.loads(json.dumps(GEMMA4)), strict=False))
    assert replace(ours, notes=()) == replace(counted.counts, notes=())
    result = runner.invoke(app, ["estimate", "--model", str(_file(tmp_path, GEMMA4, "gemma4-tiny")), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert "activations estimated, not measured" not in result.output
    assert json.loads(result.output)["model"]["num_params"] == ours.num_params


def test_a_forward_that_cannot_run_on_meta_takes_the_nearest_block(build):
    """Gemma 4's forward fails on the shallow copy (its per-layer inputs are reshaped by the full depth): counted by
    transformers (zeroplan.models.hf.describe), its activations are zeroplan's own Gemma 4 block read from the same
    text_config, and the first assumption says which and why."""
    from zeroplan.memory.activations import activation_bytes
    from zeroplan.memory.measured import measured_activation_bytes

    arch = build.describe(json.loads(json.dumps(GEMMA4)), "gemma4-tiny").arch
    gemma4 = parse_family_config({**GEMMA4["text_config"], "model_type": "gemma4_text"}, strict=False).architecture()
    setup = TrainingSetup(seq_len=64, micro_batch=2)
    acts = measured_activation_bytes(arch, setup)
    assert acts.total_bytes == activation_bytes(gemma4, setup).total_bytes
    assert acts.assumptions[0].startswith("activations estimated, not measured: model_type 'gemma4': its forward "
                                          "cannot run on the meta device")
    assert "zeroplan's gemma4_text block read from the same config" in acts.assumptions[0]


def test_deepseek_v32_is_described_and_counts_as_transformers_does(build):
    """DeepSeek-V3.2 (its indexer's forward reads values, so meta cannot run it) needs no forward: zeroplan describes
    it, indexer included, and its count equals the one transformers builds."""
    from zeroplan.models.params import count_params

    ours = count_params(parse_family_config(dict(DEEPSEEK_V32), strict=False))
    theirs = build.describe(dict(DEEPSEEK_V32), "v32").counts
    assert replace(ours, notes=()) == replace(theirs, notes=())


def test_a_config_transformers_refuses_is_one_line(build, tmp_path, runner):
    bad = {**DEEPSEEK_V32, "num_hidden_layers": "three"}
    with pytest.raises(SpecError, match="transformers refuses this config"):
        build.describe(bad, "bad")
    result = runner.invoke(app, ["estimate", "--model", str(_file(tmp_path, bad, "bad"))])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output


def test_progress_goes_to_the_hook_and_to_no_pipe(build, capsys):
    lines: list[str] = []
    hf.set_progress(lines.append)
    try:
        hf.count_with_transformers({**DEEPSEEK_V32, "vocab_size": 1001}, "v32", "v32")
    finally:
        hf.set_progress(None)
    assert lines == ["model_type deepseek_v32: loading torch and transformers to count it on the meta device"]
    hf.count_with_transformers({**DEEPSEEK_V32, "vocab_size": 1002}, "v32", "v32")
    assert capsys.readouterr().err == ""  # stderr is not a terminal here: no line


# Older transformers ports from their config classes' own defaults (transformers 5.25): blocks that are no
# GradientCheckpointingLayer (CTRL, XLNet), a config that refuses a cut depth (ProphetNet), a model that builds only
# with its own attention code (GPT-Neo), Gemma 3n's per-layer intermediate_size list; each keeps its count and gets
# the nearest block's estimate, said.
@pytest.mark.parametrize(("model_type", "reason"), [
    ("ctrl", "no GradientCheckpointingLayer blocks"), ("xlnet", "no GradientCheckpointingLayer blocks"),
    ("prophetnet", "cannot be cut to the copy's depth"), ("gpt_neo", "does not build it with the attention"),
    ("gemma3n_text", "its forward cannot run on the meta device"),  # and intermediate_size a per-layer list
])
def test_a_model_the_probe_cannot_cut_or_record_is_estimated_and_said(build, tmp_path, runner, model_type, reason):
    import transformers

    data = json.loads(json.dumps(transformers.AutoConfig.for_model(model_type).to_dict(), default=str))
    path = _file(tmp_path, data, model_type)
    result = runner.invoke(app, ["estimate", "--model", str(path), "--seq-len", "128", "-f", "json"])
    assert result.exit_code == 0, result.output
    notes = json.loads(result.output[result.output.index("{"):])["activations"]["assumptions"]
    assert notes[0].startswith("activations estimated, not measured") and reason in notes[0], notes[0]


@pytest.mark.parametrize("model_type", ["reformer", "gemma3n"])
def test_a_model_transformers_cannot_build_here_is_one_line(build, tmp_path, runner, model_type):
    """Reformer's LM head asserts is_decoder; Gemma 3n's vision tower needs timm and pillow: one error line."""
    import importlib.util

    import transformers

    if model_type == "gemma3n" and all(importlib.util.find_spec(m) for m in ("PIL", "timm")):
        pytest.skip("timm and pillow are installed here: Gemma 3n builds")

    data = json.loads(json.dumps(transformers.AutoConfig.for_model(model_type).to_dict(), default=str))
    result = runner.invoke(app, ["estimate", "--model", str(_file(tmp_path, data, model_type)), "--seq-len", "128"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.startswith("error:") and len(result.output.strip().splitlines()) == 1, result.output
