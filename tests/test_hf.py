"""The zeroplan[hf] extra: a model_type zeroplan does not describe, counted by transformers on the meta device.

Without the extra the error names it (runs everywhere). The tests marked `torch` need torch and transformers
(/work/venv-hf; skipped when absent): the hf path's counts equal zeroplan's own for described families, its
measured activations equal zeroplan's formulas, and an undescribed family runs through every calculator.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from zeroplan.cli.app import app
from zeroplan.errors import SpecError
from zeroplan.memory.setup import Attention, Checkpointing, Loss, Precision, TrainingSetup
from zeroplan.models import hf
from zeroplan.models.families import FAMILIES, parse_family_config
from zeroplan.models.presets import load_model

ROOT = Path(__file__).resolve().parent.parent
# A decoder family transformers builds and zeroplan does not describe (transformers' modeling_persimmon.py).
UNDESCRIBED = {"model_type": "persimmon", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
               "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 256}
TINY = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=1000, max_position_embeddings=256)
DESCRIBED = {
    "llama": {"model_type": "llama", **TINY},
    "mixtral": {"model_type": "mixtral", **TINY, "intermediate_size": 64, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "gemma2": {"model_type": "gemma2", **TINY, "head_dim": 16, "sliding_window": 256, "query_pre_attn_scalar": 16},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "vocab_size": 1000, "n_positions": 256},
}


def _config_file(tmp_path: Path, data: dict, name: str = "tiny") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder / "config.json"


def test_the_undescribed_type_is_not_a_family():
    assert UNDESCRIBED["model_type"] not in FAMILIES


def test_without_the_extra_the_error_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr(hf, "has_extra", lambda: False)
    path = _config_file(tmp_path, UNDESCRIBED)
    with pytest.raises(SpecError) as exc:
        load_model(str(path))
    assert str(exc.value) == (f"{path}: model_type 'persimmon' is not described by zeroplan; install zeroplan[hf] "
                              "to count it with transformers")


def test_without_the_extra_the_cli_prints_one_line(tmp_path, monkeypatch, runner):
    monkeypatch.setattr(hf, "has_extra", lambda: False)
    path = _config_file(tmp_path, UNDESCRIBED)
    result = runner.invoke(app, ["estimate", "--model", str(path)])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("install zeroplan[hf] to count it with transformers"), result.output


def test_a_described_family_never_loads_torch(tmp_path):
    """The extra is loaded for an undescribed model_type only: a llama config.json estimate imports no torch."""
    path = _config_file(tmp_path, DESCRIBED["llama"])
    code = (f"import sys, zeroplan\nzeroplan.estimate(model={str(path)!r}, gpus=1)\n"
            "print(sorted(m for m in ('torch', 'transformers', 'zeroplan.models.hf.build') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# --- with the extra -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def build():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from zeroplan.models.hf import build

    return build


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(DESCRIBED))
def test_counts_equal_zeroplans_own(build, name):
    from zeroplan.models.params import count_params

    data = DESCRIBED[name]
    counted = build.describe(dict(data), name)
    assert replace(counted.counts, notes=()) == replace(count_params(parse_family_config(dict(data), strict=False)),
                                                       notes=())
    assert sum(m.params * m.count for m in counted.modules if not m.tied) == counted.counts.num_params


CHECKPOINTING = [(Checkpointing.none, 1), (Checkpointing.selective, 1), (Checkpointing.full, 1), (Checkpointing.full, 2)]
SETUPS = [TrainingSetup(precision=p, seq_len=64, micro_batch=2, checkpointing=c, checkpoint_every=n, attention=a)
          for p in (Precision.bf16_mixed, Precision.fp32) for c, n in CHECKPOINTING for a in Attention]
SETUPS += [replace(SETUPS[0], loss=loss) for loss in Loss if loss is not Loss.hf]


@pytest.mark.torch
@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_measured_activations_equal_the_formulas(build, name):
    """The meta forward of a 2-layer copy, scaled to 4 layers, against zeroplan's formula (the CPU harness,
    validation/measure_hf.py, checks both against a real forward)."""
    from zeroplan.memory.activations import activation_bytes
    from zeroplan.memory.measured import measured_activation_bytes

    data = DESCRIBED[name]
    arch = build.describe(dict(data), name).arch
    formula_arch = parse_family_config(dict(data), strict=False).architecture()
    for setup in SETUPS:
        measured = measured_activation_bytes(arch, setup).total_bytes
        formula = activation_bytes(formula_arch, setup).total_bytes
        assert abs(measured - formula) <= 0.02 * formula, (setup, measured, formula)


@pytest.mark.torch
def test_an_undescribed_family_runs_through_the_calculators(build, tmp_path, runner):
    path = _config_file(tmp_path, UNDESCRIBED, "persimmon-tiny")
    model = load_model(str(path))
    assert model.name == "persimmon-tiny" and isinstance(model, hf.HFModel)
    result = runner.invoke(app, ["estimate", "--model", str(path), "--gpus", "2", "-f", "json"])
    assert result.exit_code == 0, result.output
    text = json.dumps(json.loads(result.output))
    assert "counted by transformers" in text and "meta-device forward" in text
    fsdp2 = runner.invoke(app, ["estimate", "--model", str(path), "--gpus", "2", "--engine", "fsdp2"])
    assert fsdp2.exit_code == 0, fsdp2.output


@pytest.mark.torch
def test_the_layout_has_the_built_tensor_shapes(build):
    from zeroplan.memory.engines import layout_for

    counted = build.describe(dict(UNDESCRIBED), "persimmon")
    layout = layout_for(hf.HFModel(name="p", source="t", config=counted))
    assert layout.num_blocks == UNDESCRIBED["num_hidden_layers"] and layout.exact_shapes
    assert sum(layout.unit_numels) == counted.counts.num_params
    assert (4 * 64 * 3 // 4 * 4, 64) not in layout.block  # fused qkv is one (3 h, h) weight in Persimmon
    assert (3 * 64, 64) in layout.block


@pytest.mark.torch
def test_a_scaled_depth_keeps_the_measurement(build):
    """capacity's deeper model: the measured per-layer bytes times the new depth."""
    from zeroplan.memory.measured import measured_activation_bytes

    arch = build.describe(dict(UNDESCRIBED), "persimmon").arch
    setup = SETUPS[0]
    one, deeper = measured_activation_bytes(arch, setup), measured_activation_bytes(replace(arch, num_layers=6), setup)
    assert deeper.layers_bytes == 2 * one.layers_bytes
    assert deeper.total_bytes - deeper.layers_bytes == one.total_bytes - one.layers_bytes


@pytest.mark.torch
def test_a_type_transformers_does_not_know_is_one_line(build):
    with pytest.raises(SpecError, match="described neither by zeroplan nor by transformers"):
        build.describe({"model_type": "no-such-model", "hidden_size": 64}, "cfg")


@pytest.mark.torch
def test_persistent_buffers_and_moe_active_are_reported(build):
    """DeepSeek-V3's router keeps `e_score_correction_bias` (E per MoE layer) as a persistent buffer, not a
    parameter (transformers' modeling_deepseek_v3.py); the active count skips (E - k) / E of the fused experts."""
    data = {"model_type": "deepseek_v3", **TINY, "num_key_value_heads": 4, "moe_intermediate_size": 32,
            "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
            "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}
    counted = build.describe(dict(data), "deepseek")
    moe_layers = TINY["num_hidden_layers"] - 1
    assert any(note.startswith(f"{moe_layers * 4:,} elements of persistent buffers") for note in counted.notes)
    experts = [m for m in counted.modules if m.role == "experts"]
    assert [m.count for m in experts] == [moe_layers]
    skipped = experts[0].params // 4 * (4 - 2) * moe_layers
    assert counted.counts.num_active_params == counted.counts.num_params - skipped


@pytest.mark.torch
def test_a_model_without_attention_is_one_line(build):
    with pytest.raises(SpecError, match=r"^cfg: model_type 'mamba': transformers' MambaConfig has no "
                                        r"num_attention_heads"):
        build.describe({"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}, "cfg")


@pytest.mark.torch
def test_per_op_selective_checkpointing_is_refused(build):
    from zeroplan.errors import ZeroplanError
    from zeroplan.memory.measured import measured_activation_bytes

    arch = build.describe(dict(UNDESCRIBED), "persimmon").arch
    with pytest.raises(ZeroplanError, match="selective-op .* not modelled for persimmon"):
        measured_activation_bytes(arch, replace(SETUPS[0], checkpointing=Checkpointing.selective_op))
