"""Measure what a DeepSeek-V4 training forward keeps for backward, per layer kind, and record it as data.

    python validation/measure_deepseek_v4.py            # writes validation/activations_deepseek_v4.json
    python validation/measure_deepseek_v4.py --print --case base

The quantity of validation/measure_activations.py (read its docstring; its attention stand-ins, checkpointed
core and CUDA-like dropout are reused), with one difference that DeepSeek-V4 needs: a saved tensor counts only if
it is still alive when the forward and loss have returned. The lightning indexer
(transformers==5.25.0:models/deepseek_v4/modeling_deepseek_v4.py DeepseekV4Indexer) ends in a top-k whose integer
indices only build the attention's block mask: nothing the loss depends on reaches back into it, so autograd frees
what its ops saved before the forward ends (its parameters get no gradient). The pack hook hands autograd a small
holder per saved tensor; a storage counts while a holder of it is alive.

Two ways to hold the weights (`weights`): cast, every parameter in the compute dtype (model.to(dtype), as DeepSpeed's
module.bfloat16() and FSDP's param_dtype compute and as zeroplan assumes for every family); loaded, as transformers
loads the model in 16 bits (from_config(dtype=...)), the modules it keeps in fp32
(DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict: the hyper-connections, the norms, sinks, position
biases) left fp32 (a run no engine casts). DeepSeek-V4 has eager attention only (_supports_sdpa and
_supports_flash_attn False: head_dim 512).
Recorded per case: saved, held, logits, copy, recompute_layer, recompute_core as the harness defines them, and
per layer the bytes only that layer keeps (layers). zeroplan's formula is compared with the file by
tests/test_deepseek_v4_activations.py (no torch).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import sys
import warnings
import weakref
from pathlib import Path

import torch
import transformers
from transformers.modeling_layers import GradientCheckpointingLayer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from validation import measure_activations as harness
from validation.measure_new_families import total
from zeroplan.memory.setup import Checkpointing

OUT = Path(__file__).resolve().parent / "activations_deepseek_v4.json"
SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
_BASE = dict(hidden_size=64, moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4, head_dim=16,
             q_lora_rank=32, n_routed_experts=4, num_experts_per_tok=2, vocab_size=1000, max_position_embeddings=256,
             layer_types=[SLIDING, CSA, HCA], mlp_layer_types=["hash_moe", "moe", "moe"],
             compress_rates={CSA: 4, HCA: 8}, hc_mult=2, hc_sinkhorn_iters=3, sliding_window=8, o_groups=2,
             o_lora_rank=16, index_n_heads=2, index_head_dim=8, index_topk=4, partial_rotary_factor=0.5,
             pad_token_id=0, bos_token_id=0, eos_token_id=0)
# Each varies what a formula could otherwise be fitted to: widths, heads, streams, Sinkhorn iterations, compress
# rates (one that leaves a remainder: s = 32, 64 are not multiples of 12), the indexer, the rotary slice.
CASES: dict[str, dict] = {
    "base": _BASE,
    "wide": _BASE | dict(hidden_size=96, num_attention_heads=6, head_dim=24, q_lora_rank=48, moe_intermediate_size=40,
                         hc_mult=4, hc_sinkhorn_iters=5, o_groups=3, o_lora_rank=8, partial_rotary_factor=1 / 3),
    "rates": _BASE | dict(layer_types=[HCA, CSA, CSA], mlp_layer_types=["moe", "hash_moe", "moe"],
                          compress_rates={CSA: 8, HCA: 12}, index_n_heads=3, index_head_dim=16, index_topk=16,
                          hc_mult=3, hc_sinkhorn_iters=1, num_experts_per_tok=3, n_routed_experts=6,
                          scoring_func="sigmoid"),
}
SEQ_LENS, MICRO_BATCHES = (32, 64), (1, 2)
CHECKPOINTING = (Checkpointing.none, Checkpointing.full, Checkpointing.selective)
# cast: every parameter in the compute dtype, as the engines compute (DeepSpeed's module.bfloat16(), FSDP's
# param_dtype) and as zeroplan assumes for every family; loaded: as from_pretrained(dtype=bf16) leaves it, the
# _keep_in_fp32_modules_strict in fp32 (a run with no engine cast: plain DDP, one GPU).
CAST, LOADED = "cast", "loaded"


class _Held:
    """What autograd stores for one saved tensor: alive exactly as long as the graph node that saved it."""

    __slots__ = ("t", "__weakref__")

    def __init__(self, t: torch.Tensor):
        self.t = t


class LiveRecorder(harness.Recorder):
    """The harness's recorder, counting only what is still saved when the forward has returned."""

    def __init__(self, model):
        super().__init__(model)
        self.holders: list[tuple[weakref.ref, int | None, bool, int]] = []
        self.layer_args: set[int] = set()

    def pack(self, t: torch.Tensor):
        if t.untyped_storage().data_ptr() in self.params:
            return t
        held = _Held(t.detach())  # no grad_fn: a saved output would otherwise hold its own node (a cycle)
        self.holders.append((weakref.ref(held), self.layer, bool(self.core_depth), self._bytes(t)))
        return held

    def prune(self) -> None:
        """The saved storages, by layer and core, of the holders still alive (a freed storage's address may be
        reused by a later tensor: only the living are keyed by it)."""
        gc.collect()
        for ref, layer, in_core, nbytes in self.holders:
            held = ref()
            if held is None:
                continue
            ptr = held.t.untyped_storage().data_ptr()
            self.saved.setdefault(ptr, nbytes)
            if layer is not None:
                self.layers_of.setdefault(ptr, set()).add(layer)
            if in_core:
                self.in_core.add(ptr)

    def recompute_layer_bytes(self) -> int:
        """As the harness's, less what the layer was handed (rotary tables, masks): a recompute re-reads them."""
        per: dict[int, int] = {}
        for ptr, layers in self.layers_of.items():
            if len(layers) == 1 and ptr not in self.layer_args:
                (layer,) = layers
                if ptr != self.layer_inputs.get(layer):
                    per[layer] = per.get(layer, 0) + self.saved[ptr]
        return max(per.values(), default=0)


def _unpack(held):
    return held.t if isinstance(held, _Held) else held


def build(case: str, dtype: str, checkpointing: Checkpointing, weights: str):
    cfg = transformers.AutoConfig.for_model("deepseek_v4", **CASES[case])
    impl = f"zp_eager{'_sel' if checkpointing is Checkpointing.selective else ''}"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=impl,
                                                          dtype=harness.DTYPES[dtype][0])
    if weights == CAST:  # as DeepSpeed (module.bfloat16()) and FSDP's param_dtype compute it: every parameter e
        model = model.to(harness.DTYPES[dtype][0])
    model.train()
    if checkpointing is Checkpointing.full:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def measure(case: str, dtype: str, checkpointing: Checkpointing, s: int, b: int, weights: str = CAST) -> dict:
    model = build(case, dtype, checkpointing, weights)
    rec = harness.RECORDER = LiveRecorder(model)
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    hooks = []
    for i, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(functools.partial(_enter, rec, i), with_kwargs=True))
        hooks.append(layer.register_forward_hook(lambda *_: setattr(rec, "layer", None)))
    torch.manual_seed(1)
    ids = torch.randint(1, CASES[case]["vocab_size"], (b, s))
    try:
        with harness.cuda_like_dropout(), torch.autograd.graph.saved_tensors_hooks(rec.pack, _unpack):
            out = model(input_ids=ids, labels=ids.clone(), use_cache=False)
    finally:
        harness.RECORDER = None
        for h in hooks:
            h.remove()
    rec.prune()
    logits = out.logits
    held = {p: n for p, n in rec.held.items() if p not in rec.saved} if checkpointing is Checkpointing.full else {}
    per_layer: dict[int, int] = {}
    for ptr, owners in rec.layers_of.items():
        if len(owners) == 1:
            (layer,) = owners
            per_layer[layer] = per_layer.get(layer, 0) + rec.saved[ptr]
    row = dict(case=case, weights=weights, dtype=dtype, checkpointing=checkpointing.value, seq_len=s, micro_batch=b,
               saved=sum(rec.saved.values()), held=sum(held.values()),
               logits=0 if logits.untyped_storage().data_ptr() in rec.saved else logits.untyped_storage().nbytes(),
               copy=logits.numel() * 4 if logits.dtype != torch.float32 else 0,
               recompute_layer=rec.recompute_layer_bytes(), recompute_core=rec.recompute_core_bytes(),
               layers=[per_layer.get(i, 0) for i in range(len(layers))])
    del out
    return row


def _enter(rec: LiveRecorder, index: int, module, args, kwargs) -> None:
    harness._enter_layer(rec, index, module, args, kwargs)
    rec.layer_args.update(t.untyped_storage().data_ptr() for t in harness._tensors((args[1:], kwargs)))


def _key(row: dict) -> tuple:
    return row["case"], row["weights"], row["dtype"], row["seq_len"], row["micro_batch"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", action="append", choices=list(CASES))
    parser.add_argument("--print", action="store_true", help="print the rows; do not write the file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        for case in args.case or list(CASES):
            for weights in (CAST, LOADED):
                for dtype in harness.DTYPES:
                    for s in SEQ_LENS:
                        for b in MICRO_BATCHES:
                            for ckpt in CHECKPOINTING if weights == CAST else CHECKPOINTING[:1]:
                                rows.append(measure(case, dtype, ckpt, s, b, weights))  # none first (recompute)
    refs = {_key(r): r for r in rows if r["checkpointing"] == "none"}
    for r in rows:
        r["total"] = total(r, refs[_key(r)])
    if args.print:
        for r in rows:
            print(r)
        return 0
    data = {"torch": torch.__version__, "transformers": transformers.__version__,
            "configs": {k: {"model_type": "deepseek_v4", **kw} for k, kw in CASES.items()}, "cases": rows}
    OUT.write_text(json.dumps(data, indent=None, separators=(",", ":")).replace('{"case"', '\n{"case"') + "\n")
    print(f"{len(rows)} cases -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
