"""Measure the activation bytes a training forward keeps alive, and compare with zeroplan.

Needs a (CPU) build of PyTorch and transformers; zeroplan itself never imports either.

    python validation/measure_activations.py              # whole grid, summary on stdout
    python validation/measure_activations.py --write-docs # also regenerate the table in docs/activations.md

Measured quantity, defined to mean the same on a GPU:
  saved     unique storages autograd saves for backward (torch.autograd.graph.saved_tensors_hooks),
            parameters excluded; dropout runs as CUDA's native_dropout (1-byte bool mask) and
            LayerNorm mean/rstd count as fp32 (CUDA's accumulate type; CPU keeps them in bf16)
  held      with checkpointing, the other tensors a recompute re-reads: the checkpointed layers'
            keyword arguments (attention masks, rotary tables, position ids)
  logits    the logits tensor the forward returns
  copy      the fp32 copy the cross-entropy makes of 16-bit logits (alive at the forward's peak)
  recompute with checkpointing: what recomputing one layer (full) or one attention core (selective)
            in backward allocates, measured on the same case without checkpointing (the layer's saved
            storages that no other layer shares, minus its input, which the checkpoint already holds)
  total     saved + held + logits + copy                        (no checkpointing)
            saved + held + logits + max(copy, recompute)        (checkpointing: the copy is freed first)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from torch import nn
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import eager_mask, sdpa_mask
from transformers.modeling_layers import GradientCheckpointingLayer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
from zeroplan.models.architecture import Architecture
from zeroplan.models.families import parse_family_config

TOLERANCE = 0.02  # issue 13: within 2% of every measured case; the closed forms are meant to be exact
DOCS = Path(__file__).resolve().parents[1] / "docs" / "activations.md"
BEGIN, END = "<!-- BEGIN measured (validation/measure_activations.py --write-docs) -->", "<!-- END measured -->"

# Small configs, HF key names; transformers and zeroplan.families read the same dict.
_LLAMA = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=4, vocab_size=1000, max_position_embeddings=256)
_GPT2 = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=256, bos_token_id=0, eos_token_id=0)
_T5 = dict(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=1000,
           decoder_start_token_id=0, pad_token_id=0)
_SPECIAL_IDS = dict(pad_token_id=0, bos_token_id=0, eos_token_id=0)
FAMILIES: dict[str, tuple[str, dict]] = {
    "llama": ("llama", _LLAMA),
    "llama-gqa": ("llama", _LLAMA | dict(num_attention_heads=8, num_key_value_heads=2)),
    "gemma2": ("gemma2", _LLAMA | dict(num_key_value_heads=2, head_dim=16, sliding_window=256, query_pre_attn_scalar=16,
                                       attn_logit_softcapping=50.0, final_logit_softcapping=30.0)),
    "gpt2": ("gpt2", _GPT2),
    "gpt2-nodropout": ("gpt2", _GPT2 | dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    # The activation as the config names it: one fused op keeping its input, against gelu_new's four tensors.
    "gpt2-tanh": ("gpt2", _GPT2 | dict(activation_function="gelu_pytorch_tanh")),
    "llama-relu": ("llama", _LLAMA | dict(hidden_act="relu")),  # relu's saved output is the gate product's input
    "mixtral": ("mixtral", _LLAMA | dict(intermediate_size=64, num_key_value_heads=2, num_local_experts=4,
                                         num_experts_per_tok=2)),
    "qwen2": ("qwen2", _LLAMA | dict(num_attention_heads=8, num_key_value_heads=2)),
    "phi3": ("phi3", _LLAMA | _SPECIAL_IDS),
    "gpt_neox": ("gpt_neox", dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                  vocab_size=1000, max_position_embeddings=256)),
    "opt": ("opt", dict(hidden_size=64, ffn_dim=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000,
                        max_position_embeddings=256) | _SPECIAL_IDS),
    "bloom": ("bloom", dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=1000)),
    "falcon": ("falcon", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000)),
    "t5": ("t5", _T5 | dict(feed_forward_proj="relu")),
    "t5-gated": ("t5", _T5 | dict(feed_forward_proj="gated-gelu")),
}
SEQ_LENS = (32, 64)
MICRO_BATCHES = (1, 2)
DTYPES = {"bf16": (torch.bfloat16, Precision.bf16_mixed), "fp32": (torch.float32, Precision.fp32)}
ATTENTIONS = {"eager": Attention.eager, "sdpa": Attention.flash}
CHECKPOINTING = (Checkpointing.none, Checkpointing.selective, Checkpointing.full)

# Cases where the CPU kernels keep different tensors than the GPU ones; named, not measured.
EXCLUDED = {
    ("gpt2-tanh", "sdpa"): "as gpt2",
    ("gpt2", "sdpa"): "SDPA with dropout > 0 falls back on CPU to the math kernel, which keeps the a x s x s "
    "scores, probabilities and a full-width dropout mask; CUDA's flash/efficient kernels keep none of them",
    ("t5", "sdpa"): "T5 passes its learned position bias to SDPA as a dense mask that needs a gradient: the CPU "
    "math kernel keeps the score matrices, CUDA's memory-efficient kernel keeps the bias instead",
    ("t5-gated", "sdpa"): "as t5",
    ("t5", "selective"): "no selective recompute measured: T5's position bias enters the core as a keyword",
    ("t5-gated", "selective"): "as t5",
    ("bloom", "sdpa"): "BloomAttention has no SDPA / FlashAttention path: zeroplan counts BLOOM's attention as eager "
    "whatever --attention says, which the eager cases measure",
    ("bloom", "selective"): "not measurable: BloomAttention does not go through transformers' attention interface, "
    "where the measurement checkpoints the core",
    ("falcon", "selective"): "as bloom: FalconAttention picks its own attention code by name",
    ("falcon", "sdpa"): "FalconAttention hands SDPA a single k/v head (multi-query) without enable_gqa: the CPU "
    "falls back to the math kernel, which keeps fp32 score matrices",
}
# Families whose HF attention does not go through AttentionInterface: measured with the stock names.
NATIVE_ATTENTION = frozenset({"bloom", "falcon"})
IMAGE_TEXT = frozenset({"qwen3_vl", "qwen3_vl_moe"})
EXCLUDED_NOT_IN_GRID = {
    "gemma2 sdpa, seq-len > sliding_window": "HF builds a dense b x 1 x s x s sliding-window mask for SDPA, which "
    "the CPU kernel and CUDA's efficient kernel keep; FlashAttention-2 (what zeroplan's flash means) applies the "
    "window without a mask. The grid keeps seq-len <= sliding_window (256).",
}


def architecture(model_type: str, kw: dict) -> Architecture:
    """zeroplan's reading of the same config dict handed to transformers."""
    return parse_family_config({"model_type": model_type, **kw}, strict=False).architecture()


# --- making the CPU keep what CUDA keeps -----------------------------------------------------------------
_torch_dropout = nn.functional.dropout


def _cuda_like_dropout(input, p=0.5, training=True, inplace=False):
    """CUDA's at::dropout calls native_dropout (bool mask); the CPU multiplies by a mask in the input dtype."""
    if training and 0.0 < p < 1.0:
        return torch.native_dropout(input, p, True)[0]
    return _torch_dropout(input, p, training, inplace)


@contextlib.contextmanager
def cuda_like_dropout():
    nn.functional.dropout = _cuda_like_dropout
    try:
        yield
    finally:
        nn.functional.dropout = _torch_dropout


class Recorder:
    """Region-aware pack hook: which storages autograd saves, where, and what the checkpoints hold."""

    def __init__(self, model: nn.Module):
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.saved: dict[int, int] = {}  # storage -> bytes
        self.layers_of: dict[int, set[int]] = {}  # storage -> layers that saved it
        self.in_core: set[int] = set()  # storages saved inside an attention core
        self.core_inputs: set[int] = set()
        self.layer_inputs: dict[int, int] = {}  # layer -> its input's storage
        self.held: dict[int, int] = {}
        self.layer: int | None = None
        self.core_depth = 0
        self.module_stack: list[nn.Module] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr in self.params:
            return t
        self.saved.setdefault(ptr, self._bytes(t))
        if self.layer is not None:
            self.layers_of.setdefault(ptr, set()).add(self.layer)
        if self.core_depth:
            self.in_core.add(ptr)
        return t

    def _bytes(self, t: torch.Tensor) -> int:
        module = self.module_stack[-1] if self.module_stack else None
        if isinstance(module, nn.LayerNorm) and t.dtype in (torch.bfloat16, torch.float16) and t.shape[-1:] == (1,):
            return t.numel() * 4  # mean/rstd: fp32 on CUDA
        return t.untyped_storage().nbytes()

    def hold(self, tensors) -> None:
        for t in tensors:
            ptr = t.untyped_storage().data_ptr()
            if ptr not in self.params:
                self.held.setdefault(ptr, t.untyped_storage().nbytes())

    def recompute_layer_bytes(self) -> int:
        """Largest over layers: storages only that layer saved, less its own input."""
        per: dict[int, int] = {}
        for ptr, layers in self.layers_of.items():
            (layer,) = layers if len(layers) == 1 else (None,)
            if layer is not None and ptr != self.layer_inputs.get(layer):
                per[layer] = per.get(layer, 0) + self.saved[ptr]
        return max(per.values(), default=0)

    def recompute_core_bytes(self) -> int:
        per: dict[int, int] = {}
        for ptr in self.in_core - self.core_inputs:
            layers = self.layers_of.get(ptr, set())
            if len(layers) == 1:
                (layer,) = layers
                per[layer] = per.get(layer, 0) + self.saved[ptr]
        return max(per.values(), default=0)


RECORDER: Recorder | None = None


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


# --- attention implementations: the HF ones, with the core marked (and checkpointed for selective) -------
def _core(base, selective: bool):
    def attention(module, query, key, value, attention_mask, **kwargs):
        impl = base or sys.modules[type(module).__module__].eager_attention_forward
        if base is not None:
            kwargs.pop("softcap", None)  # stand-in for FlashAttention-2's soft-capping kernel: same saved set
            kwargs.pop("s_aux", None)  # and for the sink-aware flash kernels (gpt-oss): the sinks are a parameter
            if getattr(module, "sliding_window", None):
                # FlashAttention-2 applies a sliding window inside the kernel, with no mask and no repeat_kv, and
                # saves what a causal call saves (q, k, v, output, log-sum-exp): SDPA, causal, stands in for it.
                attention_mask = None
        rec = RECORDER
        if rec is not None:
            rec.core_inputs.update(t.untyped_storage().data_ptr() for t in (query, key, value))
            rec.core_depth += 1
        try:
            if selective:
                fn = functools.partial(impl, module, **kwargs)
                return torch.utils.checkpoint.checkpoint(fn, query, key, value, attention_mask, use_reentrant=False)
            return impl(module, query, key, value, attention_mask, **kwargs)
        finally:
            if rec is not None:
                rec.core_depth -= 1

    return attention


for _sel in (False, True):
    AttentionInterface.register(f"zp_eager{'_sel' * _sel}", _core(None, _sel))
    AttentionInterface.register(f"zp_fused{'_sel' * _sel}", _core(sdpa_attention_forward, _sel))
    AttentionMaskInterface.register(f"zp_eager{'_sel' * _sel}", eager_mask)
    AttentionMaskInterface.register(f"zp_fused{'_sel' * _sel}", sdpa_mask)


@dataclass(frozen=True)
class Case:
    family: str
    dtype: str
    attention: str
    checkpointing: Checkpointing
    seq_len: int
    micro_batch: int

    @property
    def key(self) -> tuple:
        return (self.family, self.dtype, self.attention, self.seq_len, self.micro_batch)


@dataclass(frozen=True)
class Measurement:
    saved: int
    held: int
    logits: int
    copy: int
    recompute_layer: int
    recompute_core: int

    def total(self, checkpointing: Checkpointing, reference: Measurement | None) -> int:
        if checkpointing is Checkpointing.none:
            return self.saved + self.held + self.logits + self.copy
        recompute = reference.recompute_layer if checkpointing is Checkpointing.full else reference.recompute_core
        return self.saved + self.held + self.logits + max(self.copy, recompute)


@functools.cache
def build(family: str, dtype: str, attention: str, checkpointing: Checkpointing) -> tuple[nn.Module, Architecture]:
    model, model_type, kw = build_model(family, dtype, attention, checkpointing)
    return model, architecture(model_type, kw)


def build_model(family: str, dtype: str, attention: str, checkpointing: Checkpointing) -> tuple[nn.Module, str, dict]:
    """The tiny transformers model of FAMILIES[family], in training mode, with the harness's attention."""
    model_type, kw = FAMILIES[family]
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    # "zp_fused": transformers gives names with "sdpa" or "flash" in them special treatment
    impl = f"zp_{'fused' if attention == 'sdpa' else 'eager'}{'_sel' if checkpointing is Checkpointing.selective else ''}"
    if family in NATIVE_ATTENTION:
        impl = attention
    torch.manual_seed(0)
    model = transformers.AutoModelForSeq2SeqLM if model_type == "t5" else transformers.AutoModelForCausalLM
    if model_type in IMAGE_TEXT:  # a language model without a *ForCausalLM of its own: the whole model, text only
        model = transformers.AutoModelForImageTextToText
    model = model.from_config(cfg, attn_implementation=impl).to(DTYPES[dtype][0])
    model.train()
    if checkpointing is Checkpointing.full:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, model_type, kw


def measure(case: Case) -> tuple[Measurement, Architecture]:
    model, arch = build(case.family, case.dtype, case.attention, case.checkpointing)
    return measure_model(case, model, arch.vocab_size, arch.family == "t5"), arch


def measure_model(case: Case, model: nn.Module, vocab: int, t5: bool = False, rec: Recorder | None = None) -> Measurement:
    """One training forward and loss of `model` on random ids, as the module docstring defines the terms."""
    global RECORDER
    rec = RECORDER = rec or Recorder(model)
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    hooks = []
    for i, layer in enumerate(layers):
        hooks.append(layer.register_forward_pre_hook(functools.partial(_enter_layer, rec, i), with_kwargs=True))
        hooks.append(layer.register_forward_hook(lambda *_: setattr(rec, "layer", None)))
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            hooks.append(module.register_forward_pre_hook(lambda m, _: rec.module_stack.append(m)))
            hooks.append(module.register_forward_hook(lambda *_: rec.module_stack.pop() and None))
    torch.manual_seed(1)
    ids = torch.randint(1, vocab, (case.micro_batch, case.seq_len))
    try:
        with cuda_like_dropout(), torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            out = model(input_ids=ids, labels=ids.clone(), use_cache=False)  # training: no KV cache
    finally:
        RECORDER = None
        for h in hooks:
            h.remove()
    logits = out.logits
    upcast = not t5 and logits.dtype != torch.float32
    held = {p: n for p, n in rec.held.items() if p not in rec.saved}
    if case.checkpointing is Checkpointing.none:
        held = {}
    m = Measurement(
        saved=sum(rec.saved.values()),
        held=sum(held.values()),
        logits=0 if logits.untyped_storage().data_ptr() in rec.saved else logits.untyped_storage().nbytes(),
        copy=logits.numel() * 4 if upcast else 0,
        recompute_layer=rec.recompute_layer_bytes(),
        recompute_core=rec.recompute_core_bytes(),
    )
    _check_kernel(case, rec, model)
    return m


def _enter_layer(rec: Recorder, index: int, module, args, kwargs):
    rec.layer = index
    hidden = args[0] if args else kwargs.get("hidden_states")
    rec.layer_inputs[index] = hidden.untyped_storage().data_ptr()
    if module.gradient_checkpointing:
        rec.hold(_tensors((args, kwargs)))


def _check_kernel(case: Case, rec: Recorder, model: nn.Module) -> None:
    """A flash case that saved no log-sum-exp fell back to the math kernel: the model would not apply."""
    if case.attention == "sdpa" and case.checkpointing is Checkpointing.none and rec.in_core:
        if not any(n == 4 * case.micro_batch * case.seq_len * model.config.get_text_config().num_attention_heads
                   for p, n in rec.saved.items() if p in rec.in_core):
            raise RuntimeError(f"{case}: SDPA kept no log-sum-exp; the CPU used a math-kernel fallback")


def predicted(arch: Architecture, case: Case) -> int:
    setup = TrainingSetup(precision=DTYPES[case.dtype][1], seq_len=case.seq_len, micro_batch=case.micro_batch,
                          checkpointing=case.checkpointing, attention=ATTENTIONS[case.attention])
    return activation_bytes(arch, setup).total_bytes


SELECTIVE_FLASH = ("zeroplan counts selective checkpointing with flash attention as none: a flash core keeps no "
                   "a x s x s matrices, and checkpointing it would drop only its log-sum-exp for one output buffer "
                   "in backward")


def excluded(family: str, attention: str, checkpointing: Checkpointing) -> str | None:
    if attention == "sdpa" and checkpointing is Checkpointing.selective:
        return SELECTIVE_FLASH
    return EXCLUDED.get((family, attention)) or EXCLUDED.get((family, checkpointing.value))


def grid(families=None, quick: bool = False):
    families = families or list(FAMILIES)
    seqs, batches = (SEQ_LENS[:1], MICRO_BATCHES[-1:]) if quick else (SEQ_LENS, MICRO_BATCHES)
    for fam, dt, attn, s, b in itertools.product(families, DTYPES, ATTENTIONS, seqs, batches):
        for ckpt in CHECKPOINTING:  # none first: the checkpointed cases take their recompute from it
            if not excluded(fam, attn, ckpt):
                yield Case(fam, dt, attn, ckpt, s, b)


def run(cases) -> list[tuple[Case, int, int]]:
    """(case, measured, predicted) for each case."""
    rows, reference = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        for case in cases:
            m, arch = measure(case)
            if case.checkpointing is Checkpointing.none:
                reference[case.key] = m
            rows.append((case, m.total(case.checkpointing, reference.get(case.key)), predicted(arch, case)))
    return rows


def error(measured: int, predicted_: int) -> float:
    return (predicted_ - measured) / measured


def markdown(rows) -> str:
    lines = ["| family | attention | checkpointing | dtype | b | s | measured B | predicted B | error |",
             "|---|---|---|---|---|---|---:|---:|---:|"]
    for c, m, p in rows:
        lines.append(f"| {c.family} | {c.attention} | {c.checkpointing.value} | {c.dtype} | {c.micro_batch} | "
                     f"{c.seq_len} | {m:,} | {p:,} | {100 * error(m, p):+.3f}% |")
    return "\n".join(lines)


def summary(rows) -> str:
    lines = ["| family | cases | max abs error | worst case |", "|---|---:|---:|---|"]
    for fam in FAMILIES:
        mine = [r for r in rows if r[0].family == fam]
        if mine:
            worst = max(mine, key=lambda r: abs(error(r[1], r[2])))
            c = worst[0]
            lines.append(f"| {fam} | {len(mine)} | {100 * abs(error(worst[1], worst[2])):.3f}% | {c.attention}, "
                         f"{c.checkpointing.value}, {c.dtype}, b={c.micro_batch}, s={c.seq_len} |")
    excl = [f"- {fam} {what}: {why}" for (fam, what), why in EXCLUDED.items()]
    excl += [f"- {what}: {why}" for what, why in EXCLUDED_NOT_IN_GRID.items()]
    excl.append(f"- every family, sdpa with selective checkpointing: {SELECTIVE_FLASH}")
    return "\n".join(lines) + "\n\nLeft out (CPU and GPU kernels keep different tensors, or not measured):\n\n" + "\n".join(excl)


def write_docs(rows) -> None:
    text = DOCS.read_text()
    head = (f"Generated by `python validation/measure_activations.py --write-docs` with torch {torch.__version__}, "
            f"transformers {transformers.__version__}; {len(rows)} cases.\n\n")
    body = f"{BEGIN}\n{head}{summary(rows)}\n\n<details><summary>All cases</summary>\n\n{markdown(rows)}\n\n</details>\n{END}"
    DOCS.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: body, text, flags=re.DOTALL))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", action="append", choices=list(FAMILIES))
    parser.add_argument("--quick", action="store_true", help="one sequence length and micro-batch")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # tiny ops: a second thread only adds synchronisation
    start = time.perf_counter()
    rows = run(grid(args.family, args.quick))
    print(markdown(rows) if args.verbose else summary(rows))
    worst = max(abs(error(m, p)) for _, m, p in rows)
    print(f"\n{len(rows)} cases in {time.perf_counter() - start:.1f} s; worst error {100 * worst:.3f}%")
    if args.write_docs:
        write_docs(rows)
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
