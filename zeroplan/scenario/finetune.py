"""The fine-tuning options (--freeze, --lora-*, --qlora, --load-in-8bit, --adapter-config) turned into a Tuning.

A peft adapter_config.json gives the LoRA spec (r, target_modules, lora_dropout, use_dora, modules_to_save, as
peft's LoraConfig writes them: peft src/peft/tuners/lora/config.py); options typed beside it override it.
Raises ZeroplanError for bad input; never prints or exits.
"""

from __future__ import annotations

from pathlib import Path

from zeroplan.errors import SpecError, ZeroplanError
from zeroplan.memory.finetune import ALL_LINEAR, Finetune, Tuning, tune
from zeroplan.memory.quant import BNB_MEASURED, QloraStack, Quant, QuantStorage, bnb_version
from zeroplan.printable import printable
from zeroplan.readers import parse_json, read_text, require_mapping
from zeroplan.validate import validated

ADAPTERS_IN_MODEL_DTYPE = {QloraStack.litgpt.value, QloraStack.torchtune.value, QloraStack.trl.value}
ADAPTER_FP32, ADAPTER_BASE = "fp32", "base"  # --adapter-dtype: peft's autocast_adapter_dtype True / False
ADAPTER_KEYS = {"r": "lora_rank", "target_modules": "lora_targets", "lora_dropout": "lora_dropout",
                "use_dora": "dora", "modules_to_save": "modules_to_save"}


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


# peft==0.21.2 LoraConfig's keys (peft/tuners/lora/config.py) that change no byte of a training run: the scaling
# (lora_alpha, alpha_pattern: `scaling = alpha / r`, no parameter; use_rslora), the initialisation (init_lora_weights,
# loftq/eva/corda/lora_ga configs), the layout of a saved file and its bookkeeping.
NO_BYTES = frozenset({
    "lora_alpha", "alpha_pattern", "use_rslora", "fan_in_fan_out", "init_lora_weights", "loftq_config", "eva_config",
    "corda_config", "lora_ga_config", "runtime_config", "ensure_weight_tying", "task_type", "peft_type",
    "auto_mapping", "peft_version", "base_model_name_or_path", "revision", "inference_mode", "megatron_core",
    "qalora_group_size",  # read only with use_qalora, which is refused
})  # fmt: skip
# Keys that change which parameters peft trains, or their shapes, at a value other than peft's default; zeroplan
# does not model them, so a config that sets one is refused in one line naming it, never estimated as if unset.
UNMODELLED = {
    "rank_pattern": "a rank per module", "layers_to_transform": "adapters on some layers only",
    "layers_pattern": "adapters on some layers only", "exclude_modules": "modules left out of target_modules",
    "layer_replication": "replicated layers", "trainable_token_indices": "trainable token embeddings",
    "target_parameters": "adapters on nn.Parameters", "bias": "trained biases", "lora_bias": "a bias on lora_B",
    "use_qalora": "QA-LoRA", "megatron_config": "Megatron parallel linears", "use_bdlora": "BD-LoRA",
    "arrow_config": "Arrow routing", "kasa_config": "KaSA", "velora_config": "VeLoRA",
    "monteclora_config": "MonteCLoRA", "alora_invocation_tokens": "activated LoRA"
}  # fmt: skip
# peft's defaults for them, which change nothing (bias "none"; the rest None, False or empty)
UNSET = {"bias": ("none",)}


def _unset(key: str, value) -> bool:
    return any(value == v and type(value) is type(v) for v in UNSET.get(key, ())) or value is None or (
        value is False or (isinstance(value, (dict, list)) and not value))


def adapter_config(path: str) -> dict:
    """The Finetune fields a peft adapter_config.json states; a key that changes what peft trains and is not modelled
    (UNMODELLED) is refused, a key zeroplan does not know at all too, and each value's type is checked."""
    origin = str(path)
    data = require_mapping(parse_json(read_text(Path(path)), origin), origin)
    if data.get("peft_type", "LORA") != "LORA":
        raise SpecError(f"{origin}: peft_type {data['peft_type']!r} is not modelled (LORA only)")
    for key, value in data.items():
        if key in UNMODELLED and not _unset(key, value):
            raise SpecError(f"{origin}: {key}: {UNMODELLED[key]} ({value!r}) is not modelled; "
                            "zeroplan would estimate the adapter as if it were unset")
        if key not in UNMODELLED and key not in NO_BYTES and key not in ADAPTER_KEYS:
            raise SpecError(f"{origin}: {key}: not a LoraConfig key zeroplan knows (peft 0.21.2); it may change "
                            "what peft trains")
    targets = data.get("target_modules")
    if isinstance(targets, str) and targets != ALL_LINEAR:
        raise SpecError(f"{origin}: target_modules {targets!r} is a regex; give the module names as a list")
    if isinstance(targets, list) and not targets:
        raise SpecError(f"{origin}: target_modules: an empty list adapts no module (peft needs target_parameters "
                        "then, which is not modelled)")
    out = {}
    for key, field in ADAPTER_KEYS.items():
        value = data.get(key)
        if value is None:
            continue
        _check_type(origin, key, value)
        if field in ("lora_targets", "modules_to_save"):
            value = (value,) if isinstance(value, str) else tuple(value)
        out[field] = value
    return out


def _check_type(origin: str, key: str, value) -> None:
    """A LoraConfig value of the type peft declares for it (r: int, lora_dropout: float, use_dora: bool, the
    module lists: a list of names or one name)."""
    if key == "r":
        ok, wanted = isinstance(value, int) and not isinstance(value, bool) and value > 0, "a positive whole number"
    elif key == "lora_dropout":
        ok, wanted = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1, \
            "a number from 0 up to 1"
    elif key == "use_dora":
        ok, wanted = isinstance(value, bool), "true or false"
    else:
        ok = isinstance(value, str) or isinstance(value, list) and all(isinstance(v, str) and v for v in value)
        wanted = "a list of module names"
    if not ok:
        raise SpecError(f"{origin}: {key}: expected {wanted}, got {value!r}")


def finetune_of(args, model_ref: str | None = None) -> Finetune | None:
    """The Finetune the options ask for; None for full training (no option given). A --from file's rules that
    name the model's own modules (zeroplan.frameworks.tuning) are resolved against `model_ref`."""
    fields: dict = adapter_config(args.adapter_config) if args.adapter_config else {}
    if args.lora_rank is not None:
        fields["lora_rank"] = _rank(args.lora_rank)
    for name in ("lora_targets", "modules_to_save", "freeze"):
        if getattr(args, name):
            fields[name] = _names(getattr(args, name))
    if args.lora_dropout is not None:
        fields["lora_dropout"] = args.lora_dropout
    if args.dora:
        fields["dora"] = True
    if args.optimizer_in_backward:
        fields["optimizer_in_backward"] = True
    adapter_dtype = getattr(args, "adapter_dtype", ADAPTER_FP32)
    if adapter_dtype not in (ADAPTER_FP32, ADAPTER_BASE):
        raise ZeroplanError(f"--adapter-dtype {printable(str(adapter_dtype))}: give fp32 (peft's autocast_adapter_dtype, "
                            "its default) or base")
    if adapter_dtype == ADAPTER_BASE:
        fields["adapter_fp32"] = False
    _file_rules(args, fields, model_ref)
    if args.qlora and args.load_in_8bit:
        raise ZeroplanError("give --qlora (4-bit base) or --load-in-8bit, not both")
    storage = QuantStorage(getattr(args.quant_storage, "value", args.quant_storage))
    stack, version = getattr(args, "qlora_stack", QloraStack.peft.value), getattr(args, "bnb_version", BNB_MEASURED)
    if stack not in {s.value for s in QloraStack}:
        raise ZeroplanError(f"--qlora-stack {printable(str(stack))}: give " + " or ".join(s.value for s in QloraStack))
    try:
        bnb_version(str(version))
    except ValueError:
        raise ZeroplanError(f"--bnb-version {printable(str(version))}: give a bitsandbytes release such as 0.41.1") from None
    if args.qlora:
        fields.update(quant=Quant(getattr(args.quant_type, "value", args.quant_type)), double_quant=args.double_quant,
                      quant_storage=storage, qlora_stack=QloraStack(stack), bnb_version=version)
        if stack in ADAPTERS_IN_MODEL_DTYPE:  # litgpt's and torchtune's LoRA, TRL's bf16 cast: the module's dtype
            fields["adapter_fp32"] = False
        if stack == QloraStack.torchtune.value:  # torchao's NF4Tensor quantizes its scalers too (scaler_block_size 256)
            fields["double_quant"] = True
    elif stack != QloraStack.peft.value or version != BNB_MEASURED:
        raise ZeroplanError("--qlora-stack and --bnb-version describe a 4-bit base: give --qlora")
    elif args.load_in_8bit:
        fields["quant"] = Quant.int8
    _checkpoint_quant(args, fields, model_ref)
    quant_type = getattr(args.quant_type, "value", args.quant_type)
    if not args.qlora and (args.double_quant or storage is not QuantStorage.uint8 or quant_type != Quant.nf4.value):
        raise ZeroplanError("--double-quant, --quant-type and --quant-storage describe a 4-bit base: give --qlora")
    if not fields:
        return None
    try:
        return validated(Finetune, fields)
    except ValueError as exc:  # a cross-field rule of Finetune, raised before pydantic wraps it
        raise ZeroplanError(str(exc)) from None


def _checkpoint_quant(args, fields: dict, model_ref: str | None) -> None:
    """An FP8 block-scaled checkpoint (--model its config.json): its linears stored as FP8 with block scales, a frozen
    base for adapters (full fine-tuning of it is refused by Finetune); a bitsandbytes option beside it is refused."""
    from zeroplan.models.presets import checkpoint_fp8_block

    block = checkpoint_fp8_block(model_ref)
    if block is None:
        return
    if args.qlora or args.load_in_8bit:
        raise ZeroplanError(f"{model_ref}: an FP8 checkpoint, stored quantized already: --qlora / --load-in-8bit do not apply")
    model = _load(model_ref)
    if model.architecture().num_experts:
        raise ZeroplanError(f"{model_ref}: an FP8 mixture-of-experts checkpoint (transformers' FP8Experts) is not "
                            "modelled yet; a dense FP8 checkpoint is")  # fmt: skip
    fields.update(quant=Quant.fp8, quant_block=block)


def _file_rules(args, fields: dict, model_ref: str | None) -> None:
    """A --from file's `all` linears and freeze rule, as the names and globs the options take (options win)."""
    extra, rule = getattr(args, "lora_linear_names", None), getattr(args, "train_only", None)
    regex = getattr(args, "lora_target_rule", None)
    wants_linears = extra is not None and "lora_targets" not in fields and "lora_rank" in fields
    wants_matched = regex is not None and "lora_targets" not in fields and "lora_rank" in fields
    wants_frozen = rule is not None and not fields.get("freeze") and "lora_rank" not in fields
    if not (wants_linears or wants_matched or wants_frozen):
        return
    from zeroplan.frameworks.tuning import frozen_globs, linear_names
    from zeroplan.models.named import OUTPUT_HEAD, linears, named_parameters

    model = _load(model_ref)
    params = named_parameters(model)
    if wants_linears:
        fields["lora_targets"] = linear_names([lin.name for lin in linears(params)], OUTPUT_HEAD, _names(extra))
    if wants_matched:
        fields["lora_targets"] = regex.targets([lin.name for lin in linears(params)])
    if wants_frozen:
        names = [p.name for p in params]
        fields["freeze"] = frozen_globs(names, rule.trainable(names, model.architecture().num_layers))


def _load(model_ref: str | None):
    if not model_ref:
        raise ZeroplanError("fine-tuning modes need --model (the named parameters an adapter or glob selects)")
    from zeroplan.models.presets import load_model

    return load_model(model_ref)


def plan_tuning(fields: dict | None, model_ref: str | None, adapter_base=None) -> Tuning | None:
    """The Tuning a check plan's `finetune:` mapping states (Finetune's field names, and `adapter_config`: a
    peft adapter_config.json path, relative to `adapter_base`); None without one."""
    if not fields:
        return None
    fields = dict(fields)
    if "adapter_config" in fields:
        path = Path(str(fields.pop("adapter_config")))
        fields = {**adapter_config(str(adapter_base / path if adapter_base and not path.is_absolute() else path)),
                  **fields}
    for key in ("freeze", "lora_targets", "modules_to_save"):
        if isinstance(fields.get(key), str):
            fields[key] = _names(fields[key])
    stack = str(fields.get("qlora_stack", QloraStack.peft.value))
    if str(fields.get("quant", Quant.none.value)) in (Quant.nf4.value, Quant.fp4.value):  # as --qlora-stack sets them
        if stack in ADAPTERS_IN_MODEL_DTYPE:
            fields["adapter_fp32"] = False
        if stack == QloraStack.torchtune.value:
            fields["double_quant"] = True
    spec = validated(Finetune, fields, "finetune")
    return _tune(spec, model_ref)


def _tune(spec: Finetune, model_ref: str | None) -> Tuning:
    from zeroplan.models.named import named_parameters, tied_head

    model = _load(model_ref)
    return tune(named_parameters(model), spec, model.architecture().family, tied_head(model))


def _rank(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ZeroplanError(f"--lora-rank {text!r} is not an integer") from None
    if value <= 0:
        raise ZeroplanError(f"--lora-rank ({value}) must be a positive integer")
    return value


def tuning_of(args, model_ref: str | None, hardware=None) -> Tuning | None:
    """The Tuning of the run, from the model's named parameters; None for full training. A quantized base on
    `hardware` where bitsandbytes is known not to run it is refused (zeroplan.hardware.kernels)."""
    spec = finetune_of(args, model_ref)
    if spec is None:
        return None
    from zeroplan.hardware.kernels import check_bnb_kernels

    check_bnb_kernels(hardware, spec.quant.value)
    return _tune(spec, model_ref)


def finetune_fields(args, model_ref: str | None) -> dict | None:
    """The Finetune the options ask for as a check plan's `finetune:` mapping (its field names); None: full."""
    from dataclasses import asdict
    from enum import Enum

    spec = finetune_of(args, model_ref)
    if spec is None:
        return None
    return {k: v.value if isinstance(v, Enum) else v for k, v in asdict(spec).items() if v != getattr(Finetune(), k)}


__all__ = ["adapter_config", "finetune_fields", "finetune_of", "plan_tuning", "tuning_of"]


MAX_LORA_RANK = 4096  # the rank search's upper end


def tuned_capacity(args, scn, stage, build) -> dict:
    """Capacity answers for a fine-tune at `stage`: the largest LoRA rank that fits (LoRA runs), and the largest
    model preset that fits with the same mode, GPUs and setup (depth scaling does not apply to an adapter spec)."""
    from dataclasses import replace

    from zeroplan.memory.capacity import _largest_true, _fits
    from zeroplan.memory.tuned import check_quant_engine
    from zeroplan.models.named import named_parameters, tied_head
    from zeroplan.models.presets import load_model

    try:
        check_quant_engine(scn.tuning, scn.recipe, scn.engine, stage)
    except ZeroplanError:
        return {"max_lora_rank": None, "largest_preset": None, "largest_preset_params": None}
    rank = None
    spec = scn.tuning.spec
    if spec.lora_rank:
        model = load_model(args.model)
        params, family, tied = named_parameters(model), model.architecture().family, tied_head(model)

        def ok(r: int) -> bool:
            return _fits(replace(scn, tuning=tune(params, replace(spec, lora_rank=r), family, tied)), stage)

        rank = max(_largest_true(1, MAX_LORA_RANK, ok), 0) or None
    best = None
    for candidate in _tunable_presets():
        try:
            other = build(replace(args, model=candidate.name))
            fits = _fits(other, stage)
        except ZeroplanError:  # the mode does not apply to it (no such target, family not described)
            continue
        if fits and (best is None or other.model.num_params > best[1]):
            best = (candidate.name, other.model.num_params)
    return {"max_lora_rank": rank, "largest_preset": best[0] if best else None,
            "largest_preset_params": best[1] if best else None}


def _tunable_presets():
    from zeroplan.models import families as fam
    from zeroplan.models.presets import all_models

    return [m for m in all_models() if isinstance(m.config, fam.RMSNormDecoderConfig)]
