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
    (utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, in memory/peft_targets.py).
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
    BNB_MEASURED,
    SHARED_NESTED_MAP_BYTES,
    QloraStack,
    Quant,
    QuantStorage,
    bnb_version,
    fp8_block_bytes,
    int8_weight_bytes,
    packed_4bit_bytes,
    quant_state_4bit_bytes,
)
from zeroplan.memory.peft_targets import peft_default_targets
from zeroplan.models.named import OUTPUT_HEAD, Linear, NamedParam, linears
from zeroplan.validate import INPUT_CONFIG, Flag

ALL_LINEAR = "all-linear"


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
    quant_block: tuple[int, int] = (128, 128)  # an FP8 checkpoint's weight_block_size
    # torchtune's optimizer_in_bwd: each parameter steps in its gradient hook and frees its gradient
    optimizer_in_backward: Flag = False
    # peft get_peft_model(..., autocast_adapter_dtype=True), its default: adapters fp32 on a bf16/fp16 base
    # (peft==0.21.2:peft/tuners/tuners_utils.py cast_adapter_dtype, dtypes_to_convert_to_fp32); False: the base dtype
    adapter_fp32: Flag = True
    qlora_stack: QloraStack = QloraStack.peft  # who quantizes and prepares the base (memory/quant.py QloraStack)
    bnb_version: str = BNB_MEASURED  # bitsandbytes release: before 0.43.2 a 4-bit matmul keeps its input

    def __post_init__(self) -> None:
        if self.lora_rank < 0 or (self.lora_rank == 0 and self.adapter_asked):
            raise ValueError(f"--lora-rank ({self.lora_rank}) must be a positive integer")
        if self.quant is not Quant.none and not self.lora_rank:
            raise ValueError(f"a {self.quant.value} base cannot be trained: give --lora-rank R for adapters on it")
        bnb_version(self.bnb_version)  # ValueError naming it when it is not a release number
        if (self.qlora_stack is not QloraStack.peft or self.bnb_version != BNB_MEASURED) and not self.quant.four_bit:
            raise ValueError("--qlora-stack and --bnb-version describe a 4-bit base: give --qlora")
        if self.qlora_stack is QloraStack.torchtune and self.bnb_version != BNB_MEASURED:
            raise ValueError("--bnb-version with --qlora-stack torchtune: torchtune quantizes with torchao, "
                             "not bitsandbytes")
        if self.freeze and self.lora_rank:
            raise ValueError("--freeze is for full fine-tuning: under LoRA every base parameter is frozen already")

    @property
    def adapter_asked(self) -> bool:
        return bool(self.lora_targets or self.dora or self.modules_to_save or self.lora_dropout or not self.adapter_fp32)

    @property
    def full(self) -> bool:
        """Every parameter trains."""
        return not self.freeze and not self.lora_rank

    @property
    def mode(self) -> str:
        if self.lora_rank:
            kind = "DoRA" if self.dora else "LoRA"
            return {Quant.none: kind, Quant.int8: f"{kind} on an 8-bit base",
                    Quant.fp8: f"{kind} on an FP8 base"}.get(self.quant, f"Q{kind}")
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
    largest_quantized: int = 0  # elements of the largest quantized weight of a layer (its dequantized copy)
    adapted_params: tuple[AdaptedParam, ...] = ()  # expert and router parameters peft wraps (MoE all-linear)
    # base parameters whose own tensor (or, modules_to_save, its trainable copy) trains: what the activations read
    trainable_names: frozenset[str] = frozenset()
    head_quantized: int = 0  # elements of the output head's weight when it is quantized too (litgpt)

    @property
    def num_trainable(self) -> int:
        return sum(self.trainable)


LAYER_LISTS = ("layers", "h")  # model.layers.i (Llama and most), gpt_neox.layers.i, transformer.h.i (GPT-2)


def unit_of(name: str) -> int:
    """0 for the root (embeddings, final norm, head), i + 1 for <base>.layers.i / <base>.h.i."""
    parts = name.split(".")
    if len(parts) > 2 and parts[1] in LAYER_LISTS and parts[2].isdigit():
        return int(parts[2]) + 1
    return 0


def _matches(module: str, target: str) -> bool:
    return module == target or module.endswith("." + target)


# peft utils/transformers_weight_conversion.py (0.21.2): on the model types transformers 5 fused into 3-D expert
# parameters (transformers conversion_mapping._MODEL_TO_CONVERSION_PATTERN -> "mixtral" or "qwen2_moe"), peft maps the
# v4 linear names of the experts and the router onto parameters (_MOE_TARGET_MODULE_MAPPING) and adapts them with a
# ParamWrapper (target_parameters); a fused pair takes rank 2 r (_convert_peft_config_moe, rank_pattern).
MOE_V4_NAMES = {
    "mixtral": {"gate": "gate.weight", "w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"},
    "qwen2_moe": {"gate": "gate.weight", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj",
                  "down_proj": "down_proj"},
}
MOE_FUSED = {"mixtral": ("w1", "w3"), "qwen2_moe": ("gate_proj", "up_proj")}  # _MOE_FUSED_TARGETS: -> gate_up_proj
# zeroplan's families among _MODEL_TO_CONVERSION_PATTERN's keys (kimi_k2 loads as deepseek_v3). qwen2_moe, gpt_oss,
# granitemoe and llama4_text are not converted: all-linear there is their nn.Linear modules only.
MOE_CONVERTED = {"mixtral": "mixtral", "deepseek_v2": "qwen2_moe", "deepseek_v3": "qwen2_moe", "kimi_k2": "qwen2_moe",
                 "glm4_moe": "qwen2_moe", "qwen3_moe": "qwen2_moe", "qwen3_next": "qwen2_moe",
                 # issue 25's families in transformers 5.25's _MODEL_TO_CONVERSION_PATTERN (Qwen3-VL-MoE and
                 # Qwen3.5-MoE are not there: not converted)
                 "deepseek_v32": "qwen2_moe", "ernie4_5_moe": "qwen2_moe", "olmoe": "qwen2_moe"}
# Llama4Router subclasses nn.Linear (modeling_llama4.py): all-linear adapts it like any linear.
LINEAR_ROUTERS = {"llama4_text": ".feed_forward.router"}


@dataclass(frozen=True, slots=True)
class AdaptedParam:
    """A parameter peft wraps in a ParamWrapper (lora/layer.py): lora_A (r E, in), lora_B (out, r E), E = 1 for 2-D."""

    name: str
    shape: tuple[int, ...]
    rank: int

    @property
    def adapter_numel(self) -> int:
        experts, n_a, n_b = self.shape if len(self.shape) == 3 else (1, *self.shape)
        return self.rank * experts * (n_a + n_b)

    @property
    def param_numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def adapter_targets(params: list[NamedParam], spec: Finetune, family: str,
                    tied: Linear | None = None) -> tuple[list[Linear], list[AdaptedParam]]:
    """The linears and parameters peft wraps for `spec.lora_targets`; ZeroplanError naming the linears that exist when
    none match. `tied` is a head tied to the embedding (zeroplan.models.named.tied_head): peft wraps it when named,
    as `lm_head` (peft==0.21.2:peft/tuners/tuners_utils.py _check_tied_modules only warns, "a tied layer is part of
    the adapter"), its adapters its own and its weight still the embedding's; all-linear leaves it out."""
    lins = linears(params) + _linear_routers(params, family) + ([tied] if tied else [])
    targets = spec.lora_targets
    if targets == (ALL_LINEAR,):
        if family not in MOE_CONVERTED:
            return [lin for lin in lins if lin.name != OUTPUT_HEAD], []
        targets = tuple(dict.fromkeys(lin.name.rsplit(".", 1)[-1] for lin in lins if lin.name != OUTPUT_HEAD))
        targets += tuple(MOE_V4_NAMES[MOE_CONVERTED[family]])
    if not targets:
        targets = peft_default_targets(family)
        if not any(_matches(lin.name, t) for lin in lins for t in targets):
            raise ZeroplanError(f"peft's default LoRA targets for {family} ({','.join(targets)}) match no linear of "
                                f"the model: give --lora-targets (linears: {linear_names(lins)})")
    targets, wrapped = _moe_parameters(params, targets, spec, family)
    missing = [t for t in targets if not any(_matches(lin.name, t) for lin in lins)]
    if missing and spec.lora_targets != (ALL_LINEAR,):
        raise ZeroplanError(f"--lora-targets {','.join(missing)} match no linear of the model "
                            f"(linears: {linear_names(lins)}, or all-linear)")
    return [lin for lin in lins if any(_matches(lin.name, t) for t in targets)], wrapped


def _linear_routers(params: list[NamedParam], family: str) -> list[Linear]:
    suffix = LINEAR_ROUTERS.get(family)
    return [Linear(p.module, p.shape[1], p.shape[0], False) for p in params
            if suffix and p.module.endswith(suffix) and p.name.endswith(".weight")]


def _moe_parameters(params: list[NamedParam], targets: tuple[str, ...], spec: Finetune, family: str):
    """peft's _convert_peft_config_moe: the targets naming v4 expert / router linears become target_parameters.

    Returns the remaining module targets and the wrapped parameters. peft refuses a fused pair named by half
    ("Cannot convert PEFT target(s) ... because they are fused"), lora_dropout > 0 and DoRA on a ParamWrapper
    (lora/layer.py ParamWrapper.update_layer)."""
    kind = MOE_CONVERTED.get(family)
    if kind is None:
        return targets, []
    names, fused = MOE_V4_NAMES[kind], MOE_FUSED[kind]
    mapped = {old for t in targets for old in names if _matches(t, old)}
    if not mapped:
        return targets, []
    if 0 < len(mapped & set(fused)) < len(fused):
        raise ZeroplanError(f"--lora-targets {','.join(sorted(mapped & set(fused)))} on {family}: peft cannot adapt it "
                            f"without {','.join(sorted(set(fused) - mapped))}, fused with it into gate_up_proj")
    if spec.lora_dropout or spec.dora:
        option = f"--lora-dropout {spec.lora_dropout:g}" if spec.lora_dropout else "--dora"
        raise ZeroplanError(f"{option} on {family}'s experts and router (targets {','.join(sorted(mapped))}): peft "
                            f"adapts them as parameters (ParamWrapper), which refuses lora_dropout > 0 and DoRA; "
                            f"name the attention linears instead")
    wanted = {names[old] for old in mapped}
    wrapped = [AdaptedParam(p.name, p.shape, spec.lora_rank * (len(fused) if p.name.endswith(".gate_up_proj") else 1))
               for p in params if not p.linear and any(_matches(p.name, t) for t in wanted)]
    rest = tuple(t for t in targets if not any(_matches(t, old) for old in names))
    return rest, wrapped


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
    """transformers' quantizer skips the output head (get_keys_to_not_convert); litgpt's Lightning plugin does not."""
    head_too = spec.qlora_stack is QloraStack.litgpt
    return (spec.quant is not Quant.none and p.linear and p.name.endswith(".weight")
            and (p.module != OUTPUT_HEAD or head_too))


def _stored_bytes(p: NamedParam, spec: Finetune) -> tuple[int, int]:
    """(weight bytes, state bytes) of one quantized weight."""
    if spec.quant in (Quant.int8, Quant.fp8):  # Linear8bitLt's and FP8Linear's weight is (out, in)
        n_in, n_out = p.features if p.features[0] else (p.shape[1], p.shape[0])
        return fp8_block_bytes(n_out, n_in, spec.quant_block) if spec.quant is Quant.fp8 else int8_weight_bytes(n_out, n_in)
    return packed_4bit_bytes(p.numel, spec.quant_storage), quant_state_4bit_bytes(p.numel, spec.double_quant)


def tune(params: list[NamedParam], spec: Finetune, family: str, tied: Linear | None = None) -> Tuning:
    """The Tuning of `spec` on a model's named parameters (see the module docstring for each rule)."""
    units = 1 + max(unit_of(p.name) for p in params)
    trainable_by_unit, frozen_by_unit = [0] * units, [0] * units
    trainable: list[int] = []
    frozen_float = quantized = packed = state = saved_numel = largest = head_q = 0
    frozen = _frozen_by_glob(params, spec.freeze) if spec.freeze else set()
    saved = _saved_modules(params, spec.modules_to_save)
    trains: set[str] = set()
    for p in params:
        u = unit_of(p.name)
        if spec.full or (not spec.lora_rank and p.name not in frozen):
            trains.add(p.name)
            trainable.append(p.numel)
            trainable_by_unit[u] += p.numel
            continue
        if p.name in saved:  # the trainable copy; the original stays frozen below
            trains.add(p.name)
            trainable.append(p.numel)
            trainable_by_unit[u] += p.numel
            saved_numel += p.numel
        if _quantized(p, spec):
            weight, extra = _stored_bytes(p, spec)
            quantized, packed, state = quantized + p.numel, packed + weight, state + extra
            if p.module == OUTPUT_HEAD:
                head_q = p.numel
            else:
                largest = max(largest, p.numel)
        else:
            frozen_float += p.numel
            frozen_by_unit[u] += p.numel
    adapted: list[Linear] = []
    wrapped: list[AdaptedParam] = []
    if spec.lora_rank:
        adapted, wrapped = adapter_targets(params, spec, family, tied)
        for lin in adapted:
            for _, numel in _adapter_tensors(lin, spec.lora_rank, spec.dora):
                trainable.append(numel)
                trainable_by_unit[unit_of(lin.name)] += numel
        for w in wrapped:  # lora_A and lora_B of each ParamWrapper
            experts, n_a, n_b = w.shape if len(w.shape) == 3 else (1, *w.shape)
            trainable += [w.rank * experts * n_a, w.rank * experts * n_b]
            trainable_by_unit[unit_of(w.name)] += w.adapter_numel
    if not trainable:
        raise ZeroplanError(f"--freeze {','.join(spec.freeze)} freezes every parameter (a tied LM head with the "
                            f"embeddings): nothing would train")
    if spec.quant.four_bit and spec.double_quant:
        state += SHARED_NESTED_MAP_BYTES
    total = sum(trainable) + frozen_float + quantized
    return Tuning(spec, total, tuple(trainable), tuple(trainable_by_unit), tuple(frozen_by_unit), frozen_float,
                  quantized, packed, state, tuple(lin.name for lin in adapted), saved_numel, largest,
                  tuple(wrapped), frozenset(trains), head_q)
