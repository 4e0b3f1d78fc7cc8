"""Exact parameter counts: the whole preset registry, published anchors, closed forms, tying and MoE."""

from __future__ import annotations

import pytest

from zeroplan.models.families import parse_family_config
from zeroplan.models.params import count_params, module_inventory
from zeroplan.models.presets import load_model
from zeroplan.registry import bundled_config_dir, preset_names

PRESETS = preset_names("models")


def rounding_unit(value: int) -> int:
    """10^(trailing zeros): the place a rounded figure such as 1_300_000_000 was rounded at."""
    unit = 1
    while value % (unit * 10) == 0:
        unit *= 10
    return unit


def meets(computed: int, stated: int, rounded: bool) -> bool:
    """An exact figure is met by equality; a rounded one ("7B", "1.3B") when the count rounds to it at its last digit."""
    return abs(computed - stated) <= rounding_unit(stated) // 2 if rounded else computed == stated


@pytest.mark.parametrize("name", PRESETS)
def test_registry_preset_matches_its_published_count(name: str) -> None:
    spec = load_model(name)
    assert spec.name == name
    assert (bundled_config_dir() / "models" / f"{name}.yaml").is_file()
    assert spec.source.startswith("https://huggingface.co/") and spec.source.endswith("/config.json")
    assert spec.reference_params is not None and spec.note
    counted = count_params(spec)
    assert spec.reference_active_params is None or counted.num_active_params < counted.num_params
    stated = {"total": (counted.num_params, spec.reference_params),
              "active": (counted.num_active_params, spec.reference_active_params)}
    for figure, (computed, reference) in stated.items():
        if reference is not None:
            # A figure the preset says differs must differ (a stale flag fails too); its note says why.
            assert meets(computed, reference, spec.reference_rounded) is (figure not in spec.reference_differs)


# (params, largest layer, embeddings, active) as transformers 5.24 builds them on meta
# (validation/count_params.py; tests/test_params_torch.py re-checks them against transformers; the 2025 presets'
# figures are validation/hf_reference/counts.json's, written by validation/hf_reference/count.py).
GOLDEN = {
    # MoE presets: validation/hf_reference/counts.json (count.py, transformers 5.24 on meta) for the same configs.
    "deepseek-v3": (671_026_404_352, 11_274_289_152, 1_853_358_080, 37_552_282_624),
    "gpt-oss-120b": (116_829_156_672, 3_186_155_520, 1_158_266_880, 5_711_982_912),
    "gpt-oss-20b": (20_914_757_184, 796_538_880, 1_158_266_880, 4_187_440_704),
    "llama-4-maverick": (400_711_848_960, 16_106_127_360, 2_068_971_520, 17_184_691_200),
    "llama-4-scout": (107_769_861_120, 2_013_265_920, 2_068_971_520, 17_172_894_720),
    "qwen3-235b-a22b": (235_093_634_560, 2_415_919_104, 1_244_659_712, 22_190_763_520),
    "qwen3-30b-a3b": (30_532_122_624, 603_979_776, 622_329_856, 3_353_032_704),
    "bloom": (176_247_271_424, 3_596_615_680, 3_596_615_680, 176_247_271_424),
    "falcon-7b": (6_921_720_704, 295_469_056, 295_469_056, 6_921_720_704),
    "gemma2-27b": (27_227_128_320, 1_179_648_000, 1_179_648_000, 27_227_128_320),
    "gemma2-2b": (2_614_341_888, 589_824_000, 589_824_000, 2_614_341_888),
    "gemma2-9b": (9_241_705_984, 917_504_000, 917_504_000, 9_241_705_984),
    "gemma3-27b": (27_009_346_304, 1_409_630_208, 1_409_630_208, 27_009_346_304),
    "gpt-neox-20b": (20_554_567_680, 309_854_208, 619_708_416, 20_554_567_680),
    "gpt2": (124_439_808, 38_597_376, 39_383_808, 124_439_808),
    "gpt2-xl": (1_557_611_200, 80_411_200, 82_049_600, 1_557_611_200),
    "llama-2-7b": (6_738_415_616, 131_072_000, 262_144_000, 6_738_415_616),
    "llama-3.1-405b": (405_853_388_800, 2_101_346_304, 4_202_692_608, 405_853_388_800),
    "llama-3.1-70b": (70_553_706_496, 1_050_673_152, 2_101_346_304, 70_553_706_496),
    "llama-3.1-8b": (8_030_261_248, 525_336_576, 1_050_673_152, 8_030_261_248),
    "mistral-7b": (7_241_732_096, 131_072_000, 262_144_000, 7_241_732_096),
    "mistral-small-24b": (23_572_403_200, 671_088_640, 1_342_177_280, 23_572_403_200),
    "mixtral-8x7b": (46_702_792_704, 1_409_286_144, 262_144_000, 12_879_925_248),
    "opt-1.3b": (1_315_758_080, 102_957_056, 107_155_456, 1_315_758_080),
    "olmo2-32b": (32_234_279_936, 513_802_240, 1_027_604_480, 32_234_279_936),
    "phi-3-mini": (3_821_079_552, 98_500_608, 197_001_216, 3_821_079_552),
    "phi-4": (14_659_507_200, 513_802_240, 1_027_604_480, 14_659_507_200),
    "qwen2.5-72b": (72_706_203_648, 1_245_708_288, 2_491_416_576, 72_706_203_648),
    "qwen2.5-7b": (7_615_616_512, 544_997_376, 1_089_994_752, 7_615_616_512),
    "qwen3-32b": (32_762_123_264, 777_912_320, 1_555_824_640, 32_762_123_264),
    "qwen3-8b": (8_190_735_360, 622_329_856, 1_244_659_712, 8_190_735_360),
    "smollm3-3b": (3_075_098_624, 262_668_288, 262_668_288, 3_075_098_624),
    "ministral-3-3b": (3_429_006_336, 402_653_184, 402_653_184, 3_429_006_336),
    "starcoder2-7b": (7_173_923_840, 226_492_416, 226_492_416, 7_173_923_840),
    "aya-23-8b": (8_028_033_024, 1_048_576_000, 1_048_576_000, 8_028_033_024),
    "t5-3b": (2_851_598_336, 32_899_072, 32_899_072, 2_851_598_336),
}


def test_every_preset_has_a_golden_count() -> None:
    """GOLDEN's, or (issue 25's presets) validation/hf_reference/presets/counts.json's (tests/test_presets_hf.py)."""
    from test_presets_hf import PRESETS as ISSUE_25

    assert not set(GOLDEN) & set(ISSUE_25)
    assert sorted([*GOLDEN, *ISSUE_25]) == PRESETS


@pytest.mark.parametrize(("name", "golden"), GOLDEN.items(), ids=GOLDEN.keys())
def test_golden_counts(name: str, golden: tuple[int, int, int, int]) -> None:
    counted = count_params(load_model(name))
    assert (
        counted.num_params,
        counted.largest_layer_params,
        counted.num_embedding_params,
        counted.num_active_params,
    ) == golden


@pytest.mark.parametrize(
    ("name", "field", "expected"),
    [
        ("gemma2-9b", "num_params", 9_241_705_984),
        ("llama-3.1-8b", "num_params", 8_030_261_248),
        ("gpt2", "num_params", 124_439_808),
        ("mistral-7b", "num_params", 7_241_732_096),
        ("mixtral-8x7b", "num_params", 46_702_792_704),
        ("bloom", "num_embedding_params", 3_596_615_680),
        ("llama-2-7b", "largest_layer_params", 131_072_000),
    ],
    ids=[
        "SPEC-7-gemma2-9b",
        "SPEC-7-llama-3.1-8b",
        "SPEC-7-gpt2",
        "SPEC-7-mistral-7b",
        "SPEC-7-mixtral-8x7b",
        "bloom-model-card-3596615680-embedding-params",
        "deepspeed-estimator-print-llama-2-7b-131M-largest-layer",
    ],
)
def test_published_anchor(name: str, field: str, expected: int) -> None:
    assert getattr(count_params(load_model(name)), field) == expected


def test_deepspeed_memory_docs_t5_3b_header() -> None:
    """DeepSpeed memory.rst: 'SW: Model with 2851M total params, 32M largest layer params.'"""
    counted = count_params(load_model("t5-3b"))
    assert (int(counted.num_params / 1e6), int(counted.largest_layer_params / 1e6)) == (2851, 32)


def test_mixtral_active_params_is_the_announced_12_9b() -> None:
    """Mistral AI, 'Mixtral of experts' (2023): 46.7B total, 12.9B used per token."""
    counted = count_params(load_model("mixtral-8x7b"))
    assert round(counted.num_params / 1e9, 1) == 46.7
    assert round(counted.num_active_params / 1e9, 1) == 12.9


@pytest.mark.parametrize("name", ["gpt2", "gpt2-xl"])
def test_gpt2_closed_form(name: str) -> None:
    """P = V d + n_pos d + L (12 d^2 + 13 d) + 2 d, tied head (I = 4 d)."""
    c = load_model(name).config
    d = c.n_embd
    expected = c.vocab_size * d + c.n_positions * d + c.n_layer * (12 * d * d + 13 * d) + 2 * d
    assert count_params(c).num_params == expected


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mistral-7b"])
def test_llama_closed_form(name: str) -> None:
    """P = 2 V d + L (2 d^2 + 2 d k h_d + 3 d I + 2 d) + d, untied head, h h_d = d."""
    a = load_model(name).architecture()
    d, kv = a.hidden_size, a.num_key_value_heads * a.head_dim
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * a.intermediate_size + 2 * d
    assert count_params(load_model(name)).num_params == 2 * a.vocab_size * d + a.num_layers * per_layer + d


def test_falcon_7b_closed_form() -> None:
    """Multi-query: P = V d + L (d (d + 2 h_d) + d^2 + 8 d^2 + 2 d) + 2 d, one LayerNorm per layer."""
    a = load_model("falcon-7b").architecture()
    d, head = a.hidden_size, a.head_dim
    per_layer = d * (d + 2 * head) + d * d + 8 * d * d + 2 * d
    assert count_params(load_model("falcon-7b")).num_params == a.vocab_size * d + a.num_layers * per_layer + 2 * d


UNTIE = {
    "gpt2": {"model_type": "gpt2", "n_layer": 2},
    "opt-projected": {"model_type": "opt", "num_hidden_layers": 1, "word_embed_proj_dim": 512},
    "bloom": {"model_type": "bloom"},
    "falcon": {"model_type": "falcon", "num_hidden_layers": 1},
    "gemma2": {"model_type": "gemma2", "num_hidden_layers": 1},
    "qwen2": {"model_type": "qwen2", "num_hidden_layers": 1},
    "t5": {"model_type": "t5", "feed_forward_proj": "gated-gelu"},
}


@pytest.mark.parametrize("config", UNTIE.values(), ids=UNTIE.keys())
def test_an_untied_head_adds_one_vocab_by_embedding_matrix(config: dict) -> None:
    tied = count_params(parse_family_config({**config, "tie_word_embeddings": True}, strict=True))
    untied = count_params(parse_family_config({**config, "tie_word_embeddings": False}, strict=True))
    head = next(m for m in module_inventory(parse_family_config(config, strict=True)) if m.name == "lm_head")
    assert untied.num_params - tied.num_params == head.params
    assert untied.num_embedding_params - tied.num_embedding_params == head.params
    assert untied.largest_layer_params == tied.largest_layer_params


def test_moe_active_params_skip_the_unrouted_experts() -> None:
    """A = P - L (E - k) 3 d I: each token runs k of the E SwiGLU experts of every layer."""
    a = load_model("mixtral-8x7b").architecture()
    counted = count_params(load_model("mixtral-8x7b"))
    skipped = a.num_layers * (a.num_experts - a.num_experts_per_tok) * 3 * a.hidden_size * a.intermediate_size
    assert counted.num_params - counted.num_active_params == skipped


def test_mixtral_largest_layer_is_all_experts_of_one_layer() -> None:
    # transformers >= 5 holds a layer's experts in one module with two 3-D parameters.
    a = load_model("mixtral-8x7b").architecture()
    expected = a.num_experts * 3 * a.hidden_size * a.intermediate_size
    assert count_params(load_model("mixtral-8x7b")).largest_layer_params == expected


MOE_PRESETS = [n for n in PRESETS if load_model(n).architecture().is_moe]


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_moe_largest_layer_is_one_layers_fused_experts(name: str) -> None:
    """transformers 5.x: a layer's routed experts are one module, larger than any embedding in every MoE preset."""
    counted = count_params(load_model(name))
    largest = next(m for m in module_inventory(load_model(name)) if m.params == counted.largest_layer_params)
    assert largest.role == "experts" and counted.num_active_params < counted.num_params


@pytest.mark.parametrize("name", [n for n in PRESETS if n not in MOE_PRESETS])
def test_dense_models_are_all_active_and_largest_layer_is_the_embedding(name: str) -> None:
    counted = count_params(load_model(name))
    largest = next(m for m in module_inventory(load_model(name)) if m.params == counted.largest_layer_params)
    assert counted.num_active_params == counted.num_params
    assert largest.role == "embedding"


def test_count_params_takes_a_spec_or_its_config() -> None:
    spec = load_model("gemma2-2b")
    assert count_params(spec) == count_params(spec.config)
