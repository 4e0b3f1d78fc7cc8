"""What a fine-tune trains and what it keeps: frozen globs, LoRA / DoRA adapters, a 4-bit or 8-bit base.

`tune(params, spec)` turns a model's named parameters (zeroplan.models.named) and a Finetune spec into a
Tuning: the trainable tensors, the frozen ones as stored, and the quantization state beside them. The
memory model (memory.tuned) reads only that. Rules and sources (peft 0.21.2, github.com/huggingface/peft,
src/peft/...; transformers 5.x; bitsandbytes in memory/quant.py):
  - LoRA on a linear (in -> out) adds lora_A (r, in) and lora_B (out, r), no bias (tuners/lora/layer.py
    update_layer); DoRA adds lora_magnitude_vector (out,) (tuners/lora/dora.py). Everything else is frozen
    (tuners/tuners_utils.py _mark_only_adapters_as_trainable). rsLoRA and lora_alpha change a scale, not a byte.
  - target_modules: a name matches when it equals the module's name or is its last dotted suffix
    (tuners/tuners_utils.py check_target_module_exists); "all-linear" is every nn.Linear but the output
    head (tuners_utils.py _maybe_include_all_linear_layers); none given: peft's per-family default
    (utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: q_proj, v_proj).
  - modules_to_save: a trainable copy beside the frozen original (utils/other.py ModulesToSaveWrapper).
  - QLoRA / 8-bit: transformers' bitsandbytes quantizer replaces every nn.Linear but the output head
    (integrations/bitsandbytes.py replace_with_bnb_linear, skip list from get_keys_to_not_convert); biases
    and every other tensor stay floating point.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Annotated

from pydantic import Field

from zeroplan.errors import ZeroplanError
from zeroplan.memory.quant import (
    SHARED_NESTED_MAP_BYTES,
    Quant,
    QuantStorage,
    int8_weight_bytes,
    packed_4bit_bytes,
    quant_state_4bit_bytes,
)
from zeroplan.models.named import OUTPUT_HEAD, Linear, NamedParam, linears
from zeroplan.validate import INPUT_CONFIG, Flag

ALL_LINEAR = "all-linear"
PEFT_DEFAULT_TARGETS = ("q_proj", "v_proj")  # peft utils/constants.py for llama, mistral, mixtral, qwen2, gemma2


@dataclass(frozen=True, slots=True, kw_only=True)
class Finetune:
    """The fine-tuning mode: full (the default), frozen globs, LoRA/DoRA, and how the frozen base is stored."""

    __pydantic_config__ = INPUT_CONFIG
    freeze: tuple[str, ...] = ()  # globs over HF parameter names, e.g. model.embed_tokens.*
    lora_rank: Annotated[int, Field(description="LoRA rank r; 0 = no adapters")] = 0
    lora_targets: tuple[str, ...] = ()  # module names or ("all-linear",); () = peft's default for the family
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    dora: Flag = False
    modules_to_save: tuple[str, ...] = ()
    quant: Quant = Quant.none
    double_quant: Flag = False
    quant_storage: QuantStorage = QuantStorage.uint8
    # torchtune's optimizer_in_bwd: each parameter steps in its gradient hook and frees its gradient
    optimizer_in_backward: Flag = False

    def __post_init__(self) -> None:
        if self.lora_rank < 0 or (self.lora_rank == 0 and self.adapter_asked):
            raise ValueError(f"--lora-rank ({self.lora_rank}) must be a positive integer")
        if self.quant is not Quant.none and not self.lora_rank:
            raise ValueError(f"a {self.quant.value} base cannot be trained: give --lora-rank R for adapters on it")
        if self.freeze and self.lora_rank:
            raise ValueError("--freeze is for full fine-tuning: under LoRA every base parameter is frozen already")

    @property
    def adapter_asked(self) -> bool:
        return bool(self.lora_targets or self.dora or self.modules_to_save or self.lora_dropout)

    @property
    def full(self) -> bool:
        """Every parameter trains."""
        return not self.freeze and not self.lora_rank

    @property
    def mode(self) -> str:
        if self.lora_rank:
            kind = "DoRA" if self.dora else "LoRA"
            return {Quant.none: kind, Quant.int8: f"{kind} on an 8-bit base"}.get(self.quant, f"Q{kind}")
        return "frozen parts" if self.freeze else "full"


@dataclass(frozen=True, slots=True)
class Tuning:
    """What a fine-tune trains and keeps, per tensor where the optimizer needs it."""

    spec: Finetune
    num_params: int  # every parameter after adapters and copies, quantized weights at their logical size
    trainable: tuple[int, ...]  # elements of each trainable tensor
    trainable_by_unit: tuple[int, ...]  # trainable elements of the root (embeddings, norm, head) and of each layer
    frozen_by_unit: tuple[int, ...]  # frozen floating-point elements, same units
    frozen_float_numel: int  # frozen tensors kept floating point (cast to the working dtype)
    quantized_numel: int  # logical elements of the quantized weights
    packed_bytes: int  # the quantized weights themselves (parameters: ZeRO-3 / FSDP partition them)
    quant_state_bytes: int  # absmax, nested constants, int8 row scales: beside the weights, kept whole
    adapted: tuple[str, ...]  # module names given adapters
    saved_numel: int = 0  # trainable copies of modules_to_save: they keep the base dtype (peft upcasts adapters only)
    largest_quantized: int = 0  # elements of the largest quantized weight (its dequantized copy in backward)

    @property
    def num_trainable(self) -> int:
        return sum(self.trainable)


def unit_of(name: str) -> int:
    """0 for the root (embeddings, final norm, head), i + 1 for model.layers.i."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit():
        return int(parts[2]) + 1
    return 0


def _matches(module: str, target: str) -> bool:
    return module == target or module.endswith("." + target)


def adapter_targets(lins: list[Linear], targets: tuple[str, ...], family: str, moe: bool = False) -> list[Linear]:
    """The linears peft wraps for `targets`; ZeroplanError naming the linears that exist when none match."""
    if targets == (ALL_LINEAR,) and moe:
        raise ZeroplanError(f"--lora-targets all-linear on {family}: peft also adapts its routers and fused experts "
                            f"(target_parameters, a rank per expert), not modelled; name the linears ({linear_names(lins)})")
    if targets == (ALL_LINEAR,):
        return [lin for lin in lins if lin.name != OUTPUT_HEAD]
    if not targets:
        if not any(_matches(lin.name, t) for lin in lins for t in PEFT_DEFAULT_TARGETS):
            raise ZeroplanError(f"peft has no default LoRA targets for {family}: give --lora-targets "
                                f"(linears: {linear_names(lins)})")
        targets = PEFT_DEFAULT_TARGETS
    missing = [t for t in targets if not any(_matches(lin.name, t) for lin in lins)]
    if missing:
        raise ZeroplanError(f"--lora-targets {','.join(missing)} match no linear of the model "
                            f"(linears: {linear_names(lins)}, or all-linear)")
    return [lin for lin in lins if any(_matches(lin.name, t) for t in targets)]


def linear_names(lins: list[Linear]) -> str:
    """The distinct last names of the linears, in model order: q_proj, k_proj, ..., lm_head."""
    return ", ".join(dict.fromkeys(lin.name.rsplit(".", 1)[-1] for lin in lins))


def _adapter_tensors(lin: Linear, rank: int, dora: bool) -> list[tuple[str, int]]:
    out = [(lin.name + ".lora_A", rank * lin.n_in), (lin.name + ".lora_B", lin.n_out * rank)]
    return out + [(lin.name + ".lora_magnitude_vector", lin.n_out)] if dora else out


def _frozen_by_glob(params: list[NamedParam], globs: tuple[str, ...]) -> set[str]:
    frozen: set[str] = set()
    for glob in globs:
        hit = {p.name for p in params if fnmatchcase(p.name, glob)}
        if not hit:
            raise ZeroplanError(f"--freeze {glob} matches no parameter (names look like {params[0].name}, "
                                f"{params[1].name}, model.layers.0.*)")
        frozen |= hit
    return frozen


def _saved_modules(params: list[NamedParam], names: tuple[str, ...]) -> set[str]:
    saved: set[str] = set()
    for name in names:
        hit = {p.name for p in params if _matches(p.module, name)}
        if not hit:
            raise ZeroplanError(f"--modules-to-save {name} matches no module of the model")
        saved |= hit
    return saved


def _quantized(p: NamedParam, spec: Finetune) -> bool:
    return spec.quant is not Quant.none and p.linear and p.name.endswith(".weight") and p.module != OUTPUT_HEAD


def _stored_bytes(p: NamedParam, spec: Finetune) -> tuple[int, int]:
    """(weight bytes, state bytes) of one quantized weight."""
    if spec.quant is Quant.int8:  # Linear8bitLt's weight is (out, in), a Conv1D's transposed into it
        n_in, n_out = p.features if p.features[0] else (p.shape[1], p.shape[0])
        return int8_weight_bytes(n_out, n_in)
    return packed_4bit_bytes(p.numel, spec.quant_storage), quant_state_4bit_bytes(p.numel, spec.double_quant)


def tune(params: list[NamedParam], spec: Finetune, family: str) -> Tuning:
    """The Tuning of `spec` on a model's named parameters (see the module docstring for each rule)."""
    units = 1 + max(unit_of(p.name) for p in params)
    trainable_by_unit, frozen_by_unit = [0] * units, [0] * units
    trainable: list[int] = []
    frozen_float = quantized = packed = state = saved_numel = largest = 0
    frozen = _frozen_by_glob(params, spec.freeze) if spec.freeze else set()
    saved = _saved_modules(params, spec.modules_to_save)
    for p in params:
        u = unit_of(p.name)
        if spec.full or (not spec.lora_rank and p.name not in frozen):
            trainable.append(p.numel)
            trainable_by_unit[u] += p.numel
            continue
        if p.name in saved:  # the trainable copy; the original stays frozen below
            trainable.append(p.numel)
            trainable_by_unit[u] += p.numel
            saved_numel += p.numel
        if _quantized(p, spec):
            weight, extra = _stored_bytes(p, spec)
            quantized, packed, state = quantized + p.numel, packed + weight, state + extra
            largest = max(largest, p.numel)
        else:
            frozen_float += p.numel
            frozen_by_unit[u] += p.numel
    adapted: list[Linear] = []
    if spec.lora_rank:
        moe = any(p.module.endswith(".experts") for p in params)
        adapted = adapter_targets(linears(params), spec.lora_targets, family, moe)
        for lin in adapted:
            for _, numel in _adapter_tensors(lin, spec.lora_rank, spec.dora):
                trainable.append(numel)
                trainable_by_unit[unit_of(lin.name)] += numel
    if spec.quant.four_bit and spec.double_quant:
        state += SHARED_NESTED_MAP_BYTES
    total = sum(trainable) + frozen_float + quantized
    return Tuning(spec, total, tuple(trainable), tuple(trainable_by_unit), tuple(frozen_by_unit), frozen_float,
                  quantized, packed, state, tuple(lin.name for lin in adapted), saved_numel, largest)
