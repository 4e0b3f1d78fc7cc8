"""Family configs: transformers' defaults, strict and HF-mode parsing, model_type dispatch, round trips."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from zeroplan.errors import SpecError
from zeroplan.models.families import FAMILIES, ModelSpec, parse_family_config
from zeroplan.models.presets import model_from_data
from zeroplan.readers import parse_yaml
from zeroplan.registry import bundled_config_dir

PRESET_FILES = sorted((bundled_config_dir() / "models").glob("*.yaml"))
SUPPORTED = ", ".join(sorted(FAMILIES))


def arch(config: dict):
    return parse_family_config(config, strict=True).architecture()


# Keys a family's config class leaves unset but a model needs: DeepseekV2Config's num_experts_per_tok is None
# (its router could not pick experts; zeroplan refuses it, tests/test_params_moe.py).
REQUIRED = {"deepseek_v2": {"num_experts_per_tok": 6}}


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_model_type_picks_its_family(model_type: str) -> None:
    config = parse_family_config({"model_type": model_type, **REQUIRED.get(model_type, {})}, strict=True)
    assert type(config) is FAMILIES[model_type]
    assert config.architecture().family == model_type


# Missing keys take the transformers config class defaults (configuration_<family>.py); the torch
# tests build the same defaulted configs with transformers and compare the counts.
DEFAULTS = {
    "llama-kv-heads-and-head_dim": (
        {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32},
        {"num_key_value_heads": 32, "head_dim": 128, "tie_word_embeddings": False, "gated_mlp": True},
    ),
    "mistral": ({"model_type": "mistral"}, {"num_key_value_heads": 8, "head_dim": 128, "sliding_window": 4096}),
    "mistral-kv-null": ({"model_type": "mistral", "num_key_value_heads": None}, {"num_key_value_heads": 32}),
    "mixtral": ({"model_type": "mixtral"}, {"num_experts": 8, "num_experts_per_tok": 2, "sliding_window": None}),
    "qwen2-window-off": ({"model_type": "qwen2"}, {"num_key_value_heads": 32, "sliding_window": None}),
    "qwen2-window-on": (
        {"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 28},
        {"sliding_window": 4096},
    ),
    "qwen2-window-past-last-layer": (
        {"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 32},
        {"sliding_window": None},
    ),
    "gemma2": (
        {"model_type": "gemma2"},
        {"tie_word_embeddings": True, "head_dim": 256, "norms_per_layer": 4, "attn_logit_softcapping": 50.0,
         "final_logit_softcapping": 30.0, "sliding_window": 4096},
    ),
    "phi3": ({"model_type": "phi3"}, {"num_key_value_heads": 32, "tie_word_embeddings": False}),
    "gpt2-n_inner-none": (
        {"model_type": "gpt2"},
        {"intermediate_size": 3072, "learned_positions": 1024, "tie_word_embeddings": True, "dropout": 0.1},
    ),
    "gpt_neox": ({"model_type": "gpt_neox"}, {"parallel_attn": True, "tie_word_embeddings": False}),
    "opt": (
        {"model_type": "opt"},
        {"learned_positions": 2050, "tie_word_embeddings": True, "dropout": 0.1, "attention_dropout": 0.0},
    ),
    "bloom": ({"model_type": "bloom"}, {"hidden_size": 64, "intermediate_size": 256, "num_layers": 2}),
    "falcon-multi-query": (
        {"model_type": "falcon"},
        {"num_key_value_heads": 1, "parallel_attn": True, "norms_per_layer": 1, "head_dim": 64,
         "intermediate_size": 18176, "tie_word_embeddings": True},
    ),
    "falcon-new-architecture": (
        {"model_type": "falcon", "new_decoder_architecture": True},
        {"num_key_value_heads": 71, "norms_per_layer": 2, "parallel_attn": True},
    ),
    "falcon-sequential": (
        {"model_type": "falcon", "parallel_attn": False},
        {"parallel_attn": False, "norms_per_layer": 2},
    ),
    "t5-symmetric-tied": (
        {"model_type": "t5"},
        {"num_layers": 6, "num_encoder_layers": 6, "tie_word_embeddings": True, "gated_mlp": False},
    ),
    "t5-v1_1-shape": (
        {"model_type": "t5", "feed_forward_proj": "gated-gelu", "num_decoder_layers": 4,
         "tie_word_embeddings": False},
        {"num_layers": 4, "num_encoder_layers": 6, "gated_mlp": True, "tie_word_embeddings": False},
    ),
}


@pytest.mark.parametrize(("config", "expected"), DEFAULTS.values(), ids=DEFAULTS.keys())
def test_missing_keys_take_transformers_defaults(config: dict, expected: dict) -> None:
    architecture = arch(config)
    assert {key: getattr(architecture, key) for key in expected} == expected


def test_defaults_are_not_written_back_into_the_config() -> None:
    config = parse_family_config({"model_type": "llama", "num_attention_heads": 8}, strict=True)
    assert config.num_key_value_heads is None and config.head_dim is None
    assert config.model_dump(exclude_unset=True) == {"model_type": "llama", "num_attention_heads": 8}


def test_strict_mode_rejects_an_unknown_key_by_name() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_family_config({"model_type": "llama", "rope_theta": 500000.0}, strict=True)
    assert [error["loc"] for error in caught.value.errors()] == [("rope_theta",)]


def test_yaml_spec_with_unknown_config_key_is_one_spec_error_line() -> None:
    data = {"name": "x", "source": "s", "config": {"model_type": "llama", "rope_theta": 500000.0}}
    with pytest.raises(SpecError, match=r"^x\.yaml: config\.rope_theta: unknown key; expected one of vocab_size, "
                       r"hidden_size, .*, tie_word_embeddings, model_type, attention_bias, mlp_bias$"):
        model_from_data(data, "x.yaml")
    data["config"] = {"model_type": "llama", "hidden_sise": 4096}
    with pytest.raises(SpecError, match=r"^x\.yaml: config\.hidden_sise: unknown key; did you mean hidden_size\?$"):
        model_from_data(data, "x.yaml")


def test_yaml_spec_bounds_its_architecture() -> None:
    """A dropout of 1.5 passes the family's own NonNegativeFloat; the Architecture's bounds name it."""
    data = {"name": "x", "source": "s", "config": {"model_type": "llama", "attention_dropout": 1.5}}
    with pytest.raises(SpecError, match=r"^x\.yaml: attention_dropout: must be <= 1, got 1\.5$"):
        model_from_data(data, "x.yaml")


def test_hf_mode_ignores_keys_the_family_does_not_use() -> None:
    hf = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "rope_theta": 500000.0,
          "architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "llama3"}, "torch_dtype": "bfloat16"}
    config = parse_family_config(hf, strict=False)
    used = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}
    assert config.model_dump(exclude_unset=True) == used


@pytest.mark.parametrize("strict", [True, False], ids=["yaml", "hf"])
@pytest.mark.parametrize(("key", "value"), [("hidden_size", "4096"), ("hidden_size", 4096.5), ("mlp_bias", "no")])
def test_used_keys_are_type_checked_without_coercion(strict: bool, key: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_family_config({"model_type": "llama", key: value}, strict=strict)
    assert caught.value.errors()[0]["loc"] == (key,)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"hidden_size": 4096}, f"model_type is missing; supported: {SUPPORTED}"),
        ({"model_type": "rwkv"}, f"'rwkv' is not a supported model_type; supported: {SUPPORTED}"),
        ({"model_type": 7}, f"7 is not a supported model_type; supported: {SUPPORTED}"),
    ],
    ids=["missing", "unsupported", "not-a-string"],
)
@pytest.mark.parametrize("strict", [True, False], ids=["yaml", "hf"])
def test_bad_model_type_lists_the_supported_ones(data: dict, message: str, strict: bool) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_family_config(data, strict=strict)
    assert [(e["loc"], e["msg"]) for e in caught.value.errors()] == [(("model_type",), message)]


def test_bad_model_type_in_hf_config_is_one_spec_error_line(monkeypatch) -> None:
    """An HF config.json of a type zeroplan does not describe goes to the zeroplan[hf] extra (docs/hf.md);
    without it, the line names the extra."""
    from zeroplan.models import hf

    monkeypatch.setattr(hf, "has_extra", lambda: False)
    with pytest.raises(SpecError, match=r"^config\.json: model_type 'mamba' is not described by zeroplan; "
                                        r"install zeroplan\[hf\] to count it with transformers$"):
        model_from_data({"model_type": "mamba"}, "config.json", hf_name="m")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5},
         "num_attention_heads (32) is not a multiple of num_key_value_heads (5)"),
        ({"model_type": "gpt2", "n_embd": 100, "n_head": 12}, "n_embd (100) is not a multiple of n_head (12)"),
        ({"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3},
         "num_experts_per_tok (3) is more than num_local_experts (2)"),
        ({"model_type": "t5", "feed_forward_proj": "fancy-gelu"},
         "feed_forward_proj ('fancy-gelu') is neither 'ACT' nor 'gated-ACT' (e.g. 'gated-gelu')"),
        ({"model_type": "bloom", "n_head": 8, "num_attention_heads": 4},
         "num_attention_heads (4) and n_head (8) name the same setting with different values"),
    ],
    ids=["gqa-heads", "gpt2-heads", "top-k", "t5-activation", "bloom-alias-conflict"],
)
def test_cross_field_checks_name_every_value(config: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=r"Value error, " + message.replace("(", r"\(").replace(")", r"\)")):
        parse_family_config(config, strict=True)


def test_bloom_accepts_the_spellings_transformers_accepts() -> None:
    # n_embed is popped by BloomConfig; num_hidden_layers / num_attention_heads are its attribute_map.
    config = {"model_type": "bloom", "n_embed": 1024, "num_hidden_layers": 24, "num_attention_heads": 16}
    architecture = arch(config)
    assert (architecture.hidden_size, architecture.num_layers, architecture.num_attention_heads) == (1024, 24, 16)


def test_opt_private_key_keeps_its_hf_spelling() -> None:
    config = parse_family_config({"model_type": "opt", "_remove_final_layer_norm": True}, strict=True)
    assert config.remove_final_layer_norm
    dumped = config.model_dump(by_alias=True, exclude_unset=True)
    assert dumped == {"model_type": "opt", "_remove_final_layer_norm": True}


@pytest.mark.parametrize("path", PRESET_FILES, ids=[p.stem for p in PRESET_FILES])
def test_preset_load_then_dump_gives_the_file_back(path) -> None:
    data = parse_yaml(path.read_text(), str(path))
    spec = model_from_data(data, str(path))
    assert spec.model_dump(by_alias=True, exclude_unset=True) == data


@pytest.mark.parametrize("path", PRESET_FILES, ids=[p.stem for p in PRESET_FILES])
def test_preset_config_reads_the_same_as_an_hf_config_json(path) -> None:
    config = parse_yaml(path.read_text(), str(path))["config"]
    hf = {**config, "architectures": ["X"], "transformers_version": "4.44.0", "use_cache": True}
    assert parse_family_config(hf, strict=False) == parse_family_config(config, strict=True)


def test_model_spec_rejects_unknown_top_level_keys() -> None:
    with pytest.raises(SpecError, match=r"^m\.yaml: params: unknown key; expected one of name, source, "
                       r"hf_id, reference_params, reference_rounded, reference_active_params, reference_differs, "
                       r"note, aliases, config$"):
        model_from_data({"name": "m", "source": "s", "params": 7, "config": {"model_type": "llama"}}, "m.yaml")


def test_configs_are_frozen() -> None:
    spec = ModelSpec(name="m", source="s", config=parse_family_config({"model_type": "gpt2"}, strict=True))
    with pytest.raises(ValidationError):
        spec.config.n_layer = 1


def test_pure_modules_import_no_io_or_ui_libraries() -> None:
    code = (
        "import sys, zeroplan.models.families, zeroplan.models.params; "
        "print(sorted(m for m in ('rich', 'typer', 'yaml', 'torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_lazy_family_table_matches_what_every_class_declares():
    """families._WHERE (read to import one family's module only) names, for every model_type, the class that
    declares it in its module, and no class declares a model_type the table lacks."""
    import importlib
    import pkgutil
    from typing import get_args

    from zeroplan.models import families
    from zeroplan.models.families.base import FamilyConfig

    declared = {}
    for info in pkgutil.iter_modules(families.__path__):
        module = importlib.import_module(f"zeroplan.models.families.{info.name}")
        for cls in vars(module).values():
            if (isinstance(cls, type) and issubclass(cls, FamilyConfig) and cls.__module__ == module.__name__
                    and "model_type" in cls.model_fields):  # the shared bases declare none
                for model_type in get_args(cls.model_fields["model_type"].annotation):
                    declared[model_type] = (info.name, cls.__name__)
    assert declared == families._WHERE


def test_reading_one_preset_imports_only_its_family():
    import subprocess
    import sys

    code = ("import sys; from zeroplan.models.presets import load_model; load_model('llama-3.1-8b'); "
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('zeroplan.models.families.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["base", "rmsnorm"]
