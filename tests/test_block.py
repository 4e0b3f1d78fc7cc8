"""The block description (zeroplan.models.block) against transformers: each attention and MLP kind, written as
data for a real model, gives the module paths and tensor shapes transformers 5.24 built for that model
(validation/hf_reference/counts.json, produced by validation/hf_reference/count.py)."""

from __future__ import annotations

import pytest
from hfreference import counted_layers, measured_signatures, measured_totals, reference

from zeroplan.models.block import MLA, MLP, Attention, Decoder, Layer, LinearAttention, MoE, runs, uniform
from zeroplan.models.params.decoder import decoder_modules


def _deepseek_v3() -> Decoder:
    """DeepSeek-V3's config.json: MLA, 3 dense layers of 18432, then 58 MoE layers (256 top-8 + 1 shared)."""
    mla = MLA(heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
              v_head_dim=128)
    moe = MoE(experts=256, top_k=8, inner=2048, shared=MLP(inner=2048, prefix="shared_experts"),
              correction_bias=True)
    return Decoder(hidden=7168, vocab=129280, tie_word_embeddings=False,
                   layers=((Layer(mixer=mla, mlp=MLP(inner=18432)), 3), (Layer(mixer=mla, mlp=moe), 58)))


def _qwen3_next() -> Decoder:
    """Qwen3-Next-80B-A3B: three gated-delta-net layers then one gated full-attention layer, all MoE."""
    moe = MoE(experts=512, top_k=10, inner=512, shared=MLP(inner=512, prefix="shared_expert"), shared_gate=True)
    linear = Layer(mixer=LinearAttention(key_heads=16, value_heads=32, key_head_dim=128, value_head_dim=128,
                                         conv_kernel=4), mlp=moe, attention_type="linear_attention")
    full = Layer(mixer=Attention(heads=16, kv_heads=2, head_dim=256, qk_norm="head", output_gate=True), mlp=moe)
    return Decoder(hidden=2048, vocab=151936, tie_word_embeddings=False,
                   layers=runs([linear, linear, linear, full] * 12))


def _gpt_oss_20b() -> Decoder:
    """gpt-oss-20b: sinks, q/k/v/o biases, a router with a bias, per-expert biases, (E, d, 2I) experts."""
    attention = Attention(heads=64, kv_heads=8, head_dim=64, qkv_bias=True, o_bias=True, sinks=True)
    moe = MoE(experts=32, top_k=4, inner=2880, router="router", router_bias=True, expert_bias=True, layout="in_out")
    return Decoder(hidden=2880, vocab=201088, tie_word_embeddings=False,
                   layers=uniform(Layer(mixer=attention, mlp=moe), 24))


def _qwen15_moe() -> Decoder:
    """Qwen1.5-MoE-A2.7B: q/k/v biases, 60 experts top-4, a 4x-wide shared expert with its gate."""
    moe = MoE(experts=60, top_k=4, inner=1408, shared=MLP(inner=5632, prefix="shared_expert"), shared_gate=True)
    attention = Attention(heads=16, kv_heads=16, head_dim=128, qkv_bias=True)
    return Decoder(hidden=2048, vocab=151936, tie_word_embeddings=False,
                   layers=uniform(Layer(mixer=attention, mlp=moe), 24))


def _llama4_scout() -> Decoder:
    """Llama-4-Scout's text model: 16 experts top-1 in (E, d, 2I) layout, a shared expert, under feed_forward."""
    moe = MoE(experts=16, top_k=1, inner=8192, layout="in_out", prefix="feed_forward", router="router",
              shared=MLP(inner=8192, prefix="shared_expert"))
    attention = Attention(heads=40, kv_heads=8, head_dim=128)
    return Decoder(hidden=5120, vocab=202048, tie_word_embeddings=False,
                   layers=uniform(Layer(mixer=attention, mlp=moe), 48))


DESCRIBED = {
    "DeepSeek-V3": _deepseek_v3,
    "Qwen3-Next-80B-A3B": _qwen3_next,
    "gpt-oss-20b": _gpt_oss_20b,
    "Qwen1.5-MoE-A2.7B": _qwen15_moe,
    "Llama-4-Scout-17B-16E": _llama4_scout,
}


def _counts(dec: Decoder) -> tuple[int, int, int, int]:
    modules = decoder_modules(dec)
    owned = [m for m in modules if not m.tied]
    total = sum(m.params * m.count for m in owned)
    active = total - sum((m.params - m.active) * m.count for m in owned if m.active is not None)
    embeddings = sum(m.params * m.count for m in owned if m.role == "embedding")
    return total, max(m.params for m in modules), embeddings, active


@pytest.mark.parametrize("model", DESCRIBED)
def test_each_layer_kind_has_transformers_modules_and_shapes(model: str) -> None:
    assert counted_layers(DESCRIBED[model]()) == measured_signatures(model)


@pytest.mark.parametrize("model", DESCRIBED)
def test_totals_largest_layer_embeddings_and_active_params(model: str) -> None:
    assert _counts(DESCRIBED[model]()) == measured_totals(model)


def test_layer_runs_count_every_layer_once() -> None:
    dec = _qwen3_next()
    assert dec.num_layers == reference("Qwen3-Next-80B-A3B")["resolved_config"]["num_hidden_layers"]["value"]
    assert [count for _, count in dec.layers] == [3, 1] * 12  # 48 layers held as 24 runs


def test_module_kinds_say_what_tensor_parallelism_splits() -> None:
    by_name = {m.name: m for m in decoder_modules(_gpt_oss_20b())}
    q, o = by_name["model.layers.*.self_attn.q_proj"], by_name["model.layers.*.self_attn.o_proj"]
    assert (q.kind, q.in_features, q.out_features) == ("linear_column", 2880, 4096)
    assert (o.kind, o.in_features, o.out_features) == ("linear_row", 4096, 2880)
    assert by_name["model.layers.*.mlp.router"].kind == "router"
    experts = by_name["model.layers.*.mlp.experts"]
    assert experts.kind == "experts" and experts.active == experts.params // 32 * 4
    assert by_name["model.layers.*.self_attn"].kind == "other"  # the sinks


def test_router_correction_bias_is_a_buffer_not_a_parameter() -> None:
    from zeroplan.models.params.decoder import persistent_buffer_numel

    buffers = reference("DeepSeek-V3")["persistent_buffers"]
    assert persistent_buffer_numel(_deepseek_v3()) == sum(b["numel_total"] for b in buffers.values())
    assert _counts(_deepseek_v3())[0] == measured_totals("DeepSeek-V3")[0]  # and the count leaves it out
    assert persistent_buffer_numel(_gpt_oss_20b()) == 0 == len(reference("gpt-oss-20b")["persistent_buffers"])


def test_layer_kinds_give_each_structure_and_its_layers() -> None:
    from zeroplan.models.params.decoder import layer_kinds

    kinds = layer_kinds(_deepseek_v3())
    measured = reference("DeepSeek-V3")["layer_types"]
    assert [count for _, count in kinds] == [kind["num_layers"] for kind in measured]
    assert [sum(m.params for m in modules) for modules, _ in kinds] == [kind["params_per_layer"] for kind in measured]
    gated = layer_kinds(_qwen3_next())  # linear-attention and full-attention layers: two structures, 36 + 12
    assert sorted(count for _, count in gated) == sorted(k["num_layers"] for k in reference("Qwen3-Next-80B-A3B")[
        "layer_types"])


@pytest.mark.parametrize("model", ["DeepSeek-V3", "Qwen3-Next-80B-A3B"])
def test_fsdp_layout_has_one_block_per_layer_of_its_own_structure(model: str) -> None:
    from math import prod

    from zeroplan.memory.engines.layout import layout_from_decoder

    dec = DESCRIBED[model]()
    layout = layout_from_decoder(dec)
    ref = reference(model)
    assert sum(prod(s) for s in layout.tensors()) == ref["num_params"]
    assert sorted(n for _, n in layout.kinds) == sorted(kind["num_layers"] for kind in ref["layer_types"])
    assert sorted(layout.unit_numels[1:]) == sorted(
        kind["params_per_layer"] for kind in ref["layer_types"] for _ in range(kind["num_layers"]))
    assert layout.root_numel == ref["num_params"] - sum(k["params_per_layer"] * k["num_layers"]
                                                        for k in ref["layer_types"])
