"""Measure the activation bytes of the 2025-26 families (issue 13) and record them as data.

    python validation/measure_new_families.py            # writes validation/activations_new_families.json
    python validation/measure_new_families.py --family qwen3 --print

Same measured quantity as validation/measure_activations.py (whose recorder, attention stand-ins and
Measurement this reuses; read its docstring), on tiny configs of qwen3, qwen3_moe, gemma3_text,
llama4_text, deepseek_v3, gpt_oss, olmo2, smollm3 and glm4_moe, with s past the sliding window and the
attention chunk. Recorded per case beside the totals:
  masks     b x 1 x s x s attention masks saved or held by a checkpointed layer (eager: the additive mask;
            SDPA: Llama 4's chunked mask, which it keeps on a GPU too, having no FlashAttention path). Sliding
            windows under SDPA run as FlashAttention-2 does them, in the kernel without a mask (the harness's
            SDPA stand-in drops the mask of a sliding layer: the saved set is a causal call's)
  layers    per layer, the bytes of the storages only that layer saved (its input included)
  routing   per MoE layer, how many tokens each expert received (the real top-k routing of this forward)
zeroplan's prediction is compared with this file by tests/test_activations_new_families.py, which needs
no torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import warnings
from pathlib import Path

import torch
import transformers
from transformers.modeling_layers import GradientCheckpointingLayer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from validation import measure_activations as harness
from zeroplan.memory.setup import Checkpointing

OUT = Path(__file__).resolve().parent / "activations_new_families.json"
WINDOW = 16  # sliding window and attention chunk: the grid's s = 32, 64 run past it

_BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, vocab_size=1000, max_position_embeddings=256, pad_token_id=0, bos_token_id=0, eos_token_id=0)
_NO_HEAD_DIM = {k: v for k, v in _BASE.items() if k != "head_dim"}  # MLA: the rotary width is qk_rope_head_dim
_MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32)
NEW_FAMILIES: dict[str, tuple[str, dict]] = {
    "qwen3": ("qwen3", _BASE),
    "qwen3_moe": ("qwen3_moe", _BASE | _MOE | dict(num_experts=4, decoder_sparse_step=1, mlp_only_layers=[])),
    "gemma3_text": ("gemma3_text", _BASE | dict(sliding_window=WINDOW, query_pre_attn_scalar=16,
                                                layer_types=["sliding_attention", "full_attention"])),
    "llama4_text": ("llama4_text", _BASE | dict(intermediate_size=32, intermediate_size_mlp=128, num_local_experts=4,
                                                num_experts_per_tok=1, attention_chunk_size=WINDOW,
                                                interleave_moe_layer_step=2, no_rope_layers=[1, 0])),
    "deepseek_v3": ("deepseek_v3", _NO_HEAD_DIM | _MOE | dict(num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
                                                       qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=24,
                                                       n_routed_experts=4, n_shared_experts=1,
                                                       first_k_dense_replace=1, n_group=1, topk_group=1)),
    "deepseek_v3-narrow-v": ("deepseek_v3", _NO_HEAD_DIM | _MOE | dict(
        num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        n_routed_experts=4, n_shared_experts=2, first_k_dense_replace=0, n_group=1, topk_group=1)),
    "gpt_oss": ("gpt_oss", _BASE | dict(intermediate_size=32, num_local_experts=4, num_experts_per_tok=2,
                                        sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"])),
    "olmo2": ("olmo2", _BASE),
    "smollm3": ("smollm3", _BASE | dict(no_rope_layers=[1, 0])),
    "glm4_moe": ("glm4_moe", _BASE | _MOE | dict(n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1,
                                                 n_group=1, topk_group=1, partial_rotary_factor=0.5)),
}
# Issue 25's families (transformers 5.25), the same widths. Qwen3-VL's language model has no *ForCausalLM: its
# outer config is built whole (harness.build_model's IMAGE_TEXT), fed text only.
_LINEAR = dict(linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
               layer_types=["linear_attention", "full_attention"])
_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
               deepstack_visual_indexes=[0])
NEW_FAMILIES |= {
    # residual_dropout as its default (0.1); attention dropout 0: the CPU has no flash kernel with dropout
    "seed_oss": ("seed_oss", _BASE | dict(attention_dropout=0.0, residual_dropout=0.1)),
    "ernie4_5": ("ernie4_5", _BASE),
    "ministral3": ("ministral3", _BASE),
    "exaone4": ("exaone4", _BASE | dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"])),
    "starcoder2": ("starcoder2", _NO_HEAD_DIM),
    "phi": ("phi", _NO_HEAD_DIM | dict(hidden_act="gelu_new")),
    "cohere": ("cohere", _BASE),
    "cohere2": ("cohere2", _BASE | dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"])),
    "olmoe": ("olmoe", _BASE | dict(intermediate_size=32, num_experts=4, num_experts_per_tok=2)),
    "ernie4_5_moe": ("ernie4_5_moe", _BASE | dict(moe_num_experts=4, moe_k=2, moe_intermediate_size=32,
                                                  moe_num_shared_experts=1, moe_layer_start_index=1)),
    "qwen3_5_text": ("qwen3_5_text", _BASE | _LINEAR),
    "qwen3_5_moe_text": ("qwen3_5_moe_text", _BASE | _LINEAR | _MOE | dict(num_experts=4,
                                                                         shared_expert_intermediate_size=48)),
    "deepseek_v32": ("deepseek_v32", _NO_HEAD_DIM | _MOE | dict(
        num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=24,
        n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, index_n_heads=2,
        index_head_dim=16, index_topk=WINDOW)),
    "qwen3_vl": ("qwen3_vl", dict(text_config=_BASE, vision_config=_VISION, pad_token_id=0)),
    "qwen3_vl_moe": ("qwen3_vl_moe", dict(text_config=_BASE | _MOE | dict(num_experts=4), vision_config=_VISION,
                                          pad_token_id=0)),
}
# Gemma 4's language model (transformers 5.25): per-layer input embeddings, global layers of their own head width,
# the last two layers sharing the earlier layers' k/v with a double-wide MLP; attention_k_eq_v; the MoE block.
_GEMMA4 = _BASE | dict(sliding_window=WINDOW, global_head_dim=24, layer_types=["sliding_attention", "full_attention"],
                       hidden_size_per_layer_input=0)
NEW_FAMILIES |= {
    "gemma4_text": ("gemma4_text", _GEMMA4 | dict(
        num_hidden_layers=4, layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
        use_double_wide_mlp=True, hidden_size_per_layer_input=8, vocab_size_per_layer_input=1000,
        final_logit_softcapping=30.0)),
    "gemma4_text-k-eq-v": ("gemma4_text", _GEMMA4 | dict(attention_k_eq_v=True, num_global_key_value_heads=1)),
    "gemma4_text-moe": ("gemma4_text", _GEMMA4 | dict(intermediate_size=48, enable_moe_block=True, num_experts=4,
                                                      top_k_experts=2, moe_intermediate_size=32)),
}
# gpt-oss has no SDPA path in transformers (GptOssPreTrainedModel._supports_sdpa = False; FlashAttention with
# sinks is its fast path): the harness's SDPA stand-in measures the saved set of such a kernel, sinks dropped.
CHECKPOINTING = (Checkpointing.none, Checkpointing.full)  # and selective with eager attention (the core recomputed)
# v narrower than q/k (DeepSeek-V3: 128 against 192): the CPU's SDPA has no flash kernel for it and falls back to
# the math kernel; FlashAttention-2 pads v to q's width (DeepseekV3Attention). Measured eager only.
EAGER_ONLY = {"deepseek_v3-narrow-v"}


def _is_mask(t: torch.Tensor) -> bool:
    return t.dim() == 4 and t.shape[1] == 1 and t.shape[-1] == t.shape[-2] > 1


class RoutingRecorder(harness.Recorder):
    """The harness's recorder plus masks (saved, or held by a checkpointed layer) and, per MoE layer, the tokens
    each expert received."""

    def __init__(self, model):
        super().__init__(model)
        self.masks: dict[int, int] = {}
        self.layer_args: set[int] = set()
        self.routing: list[list[int]] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if _is_mask(t) and ptr not in self.params:
            self.masks.setdefault(ptr, t.untyped_storage().nbytes())
        return super().pack(t)

    def recompute_layer_bytes(self) -> int:
        """As the harness's, less what the layer was handed (rotary tables of its own attention type, masks): a
        recompute re-reads those, it does not make them again."""
        handed = self.layer_args
        per: dict[int, int] = {}
        for ptr, layers in self.layers_of.items():
            if len(layers) == 1 and ptr not in handed:
                (layer,) = layers
                if ptr != self.layer_inputs.get(layer):
                    per[layer] = per.get(layer, 0) + self.saved[ptr]
        return max(per.values(), default=0)

    def hold(self, tensors) -> None:
        tensors = list(tensors)
        for t in tensors:
            if _is_mask(t):
                self.masks.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        super().hold(tensors)


def _hook_routing(model, rec: RoutingRecorder, experts: int) -> list:
    hooks = []
    for name, module in model.named_modules():
        kind = type(module).__name__
        if kind.endswith("Experts") and kind != "Llama4TextExperts":  # experts(hidden, top_k_index, top_k_weights)
            def pre(mod, args, kwargs):
                index = args[1] if len(args) > 1 else kwargs.get("top_k_index", kwargs.get("router_indices"))
                rec.routing.append(torch.bincount(index.flatten(), minlength=experts).tolist())
            hooks.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        elif kind == "Llama4Router":  # Llama4TextMoe runs every expert on every token; record the top-k anyway
            def post(mod, args, out):
                with torch.no_grad():  # the recording must save nothing itself
                    index = torch.topk(out[1], mod.top_k, dim=1).indices
                rec.routing.append(torch.bincount(index.flatten(), minlength=experts).tolist())
            hooks.append(module.register_forward_hook(post))
    return hooks


def _handed(rec: RoutingRecorder, module, args, kwargs) -> None:
    rec.layer_args.update(t.untyped_storage().data_ptr() for t in harness._tensors((args[1:], kwargs)))


def _experts(kw: dict) -> int:
    return kw.get("num_experts") or kw.get("n_routed_experts") or kw.get("num_local_experts") or 0


def measure(case: harness.Case) -> dict:
    model, _, kw = harness.build_model(case.family, case.dtype, case.attention, case.checkpointing)
    kw = kw.get("text_config", kw)  # a vision-language config: its language model's keys
    rec = RoutingRecorder(model)
    hooks = _hook_routing(model, rec, _experts(kw))
    for layer in model.modules():
        if isinstance(layer, GradientCheckpointingLayer):
            hooks.append(layer.register_forward_pre_hook(functools.partial(_handed, rec), with_kwargs=True))
    try:
        m = harness.measure_model(case, model, kw["vocab_size"], rec=rec)
    finally:
        for h in hooks:
            h.remove()
    per_layer: dict[int, int] = {}
    for ptr, layers in rec.layers_of.items():
        if len(layers) == 1:
            (layer,) = layers
            per_layer[layer] = per_layer.get(layer, 0) + rec.saved[ptr]
    routing = rec.routing  # the forward only: no backward (and so no recompute) runs here
    return {
        "family": case.family, "dtype": case.dtype, "attention": case.attention,
        "checkpointing": case.checkpointing.value, "seq_len": case.seq_len, "micro_batch": case.micro_batch,
        "saved": m.saved, "held": m.held, "logits": m.logits, "copy": m.copy,
        "recompute_layer": m.recompute_layer, "recompute_core": m.recompute_core,
        "masks": sum(rec.masks.values()), "layers": [per_layer.get(i, 0) for i in range(kw["num_hidden_layers"])],
        "routing": routing,
    }


def grid(families):
    for fam in families:
        for dt in harness.DTYPES:
            for attn in ["eager"] if fam in EAGER_ONLY else harness.ATTENTIONS:
                for s in harness.SEQ_LENS:
                    for b in harness.MICRO_BATCHES:
                        for ckpt in CHECKPOINTING + ((Checkpointing.selective,) if attn == "eager" else ()):
                            yield harness.Case(fam, dt, attn, ckpt, s, b)


def total(row: dict, reference: dict | None) -> int:
    """The harness's total: checkpointed cases take the recompute from the same case without checkpointing."""
    base = row["saved"] + row["held"] + row["logits"]
    if row["checkpointing"] == "none":
        return base + row["copy"]
    recompute = reference["recompute_layer" if row["checkpointing"] == "full" else "recompute_core"]
    return base + max(row["copy"], recompute)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", choices=list(NEW_FAMILIES))
    parser.add_argument("--print", action="store_true", help="print the rows; do not write the file")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    harness.FAMILIES.update(NEW_FAMILIES)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        for case in grid(args.family or list(NEW_FAMILIES)):
            rows.append(measure(case))
    refs = {(r["family"], r["dtype"], r["attention"], r["seq_len"], r["micro_batch"]): r
            for r in rows if r["checkpointing"] == "none"}
    for r in rows:
        r["total"] = total(r, refs[(r["family"], r["dtype"], r["attention"], r["seq_len"], r["micro_batch"])])
    if args.print:
        for r in rows:
            print({k: v for k, v in r.items() if k != "routing"}, "routing", r["routing"])
        return 0
    kept = []  # --family: those families' rows replaced, the others' kept as measured before
    if args.family and OUT.exists():
        kept = [r for r in json.loads(OUT.read_text())["cases"] if r["family"] not in args.family]
    data = {"torch": torch.__version__, "transformers": transformers.__version__,
            "configs": {k: {"model_type": t, **kw} for k, (t, kw) in NEW_FAMILIES.items()}, "cases": kept + rows}
    OUT.write_text(json.dumps(data, indent=None, separators=(",", ":")).replace('{"family"', '\n{"family"') + "\n")
    print(f"{len(rows)} cases measured, {len(kept)} kept -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
