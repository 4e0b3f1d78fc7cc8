"""CI rules over the DeepSpeed config itself (and the GPU count and hardware it will run on).

Each rule states what DeepSpeed v0.19.8 does with the configuration it reports; messages quote
DeepSpeed's own assertion text where there is one, so a user can grep for it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

from zeroplan.check.findings import Finding, Rule, RunContext
from zeroplan.deepspeed.batch import BATCH_KEYS, derive_batch
from zeroplan.deepspeed.keys import duplicate_key_message
from zeroplan.deepspeed.reader import DeepSpeedConfig
from zeroplan.memory.setup import OffloadDevice, ZeroStage

# optimizer.type (lower-cased, as config.py compares it) -> the name in DeepSpeed's engine.py assertion.
ONEBIT_OPTIMIZERS = {"onebitadam": "1bit-Adam", "zerooneadam": "0/1 Adam", "onebitlamb": "1bit-Lamb"}


def _assumed(config: DeepSpeedConfig, *keys: str) -> str:
    """'; not from the file: key = value (how)' for each of `keys` whose value zeroplan filled in, or ''.

    A message never shows a value zeroplan assumed (an "auto" filled, a section Accelerate adds) as the user's.
    """
    filled = [f"{auto.key} = {str(auto.value).lower()} ({auto.how})" for auto in config.autos
              if auto.key in keys and auto.value is not None]  # fmt: skip
    return f"; not from the file: {'; '.join(filled)}" if filled else ""


def _batch_key(config: DeepSpeedConfig) -> str:
    return "train_batch_size" if config.train_batch_size is not None else "train_micro_batch_size_per_gpu"


def check_batch_identity(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    world = run.dp_world
    batch = derive_batch(
        config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps, world or 1
    )
    if batch is None:
        yield Finding(rule="batch-identity", severity="error", key="train_batch_size", message=(
            "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided (DeepSpeed asserts)"))  # fmt: skip
        return
    if world is None:
        return
    key, why = _batch_key(config), batch.derivation() + _assumed(config, *BATCH_KEYS)
    for name, value in (("Micro batch size per gpu", batch.micro_batch), ("Gradient accumulation steps", batch.grad_acc)):
        if value <= 0:
            yield Finding(rule="batch-identity", severity="error", key=key,
                          message=f"{name}: {value} has to be greater than 0 (DeepSpeed asserts){why}")  # fmt: skip
            return
    if batch.train_batch != batch.micro_batch * batch.grad_acc * world:
        yield Finding(rule="batch-identity", severity="error", key=key, message=(
            "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
            f"gradient_acc_step * world_size {batch.train_batch} != {batch.micro_batch} * {batch.grad_acc} * {world}"
            f" (world_size = data-parallel size){why}"))  # fmt: skip


def check_precision_conflict(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    if config.fp16_enabled and config.bf16_enabled:
        bf16 = f"{config.bf16_section}.enabled"
        yield Finding(rule="precision-conflict", severity="error", key=bf16,
                      message="fp16.enabled and bf16.enabled are both true: DeepSpeed asserts "
                      "'bfloat16 and fp16 modes cannot be simultaneously enabled'"
                      + _assumed(config, "fp16.enabled", bf16))  # fmt: skip


def check_bf16_hardware(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    hw = run.hardware
    if config.bf16_enabled and hw is not None and not hw.supports_bf16:
        bf16 = f"{config.bf16_section}.enabled"
        yield Finding(rule="bf16-unsupported", severity="error", key=bf16, message=(
            f"bf16 is enabled but {hw.name} has no bf16 support: DeepSpeed raises 'Type bf16 is not supported "
            f"on your device' (or torch emulates it far below fp16 speed); use fp16 with loss scaling"
            f"{_assumed(config, bf16)}"))  # fmt: skip


def check_onebit_zero(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    kind = config.optimizer_type
    if kind is None or kind.lower() not in ONEBIT_OPTIMIZERS or config.stage is ZeroStage.zero0:
        return
    yield Finding(rule="onebit-zero", severity="error", key="optimizer.type", message=(
        f"optimizer {kind} with ZeRO stage {int(config.stage)}: DeepSpeed asserts "
        f"'{ONEBIT_OPTIMIZERS[kind.lower()]} is not compatible with ZeRO'. Run it at stage 0, or keep ZeRO and "
        "cut communication with ZeRO++ (stage 3: zero_quantized_weights, zero_hpz_partition_size, "
        "zero_quantized_gradients)"))  # fmt: skip


def _key(config: DeepSpeedConfig, *candidates: str) -> str:
    """The first candidate key the file has a line for, else the first one."""
    return next((k for k in candidates if config.line_of(k)), candidates[0])


def check_offload_stage(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    knobs, stage = config.knobs, int(config.stage)
    if knobs.offload_param is not OffloadDevice.none and config.stage is not ZeroStage.zero3:
        key = _key(config, "zero_optimization.offload_param.device", "zero_optimization.cpu_offload_param")
        yield Finding(rule="offload-stage", severity="error", key=key, message=(
            f"offload_param device {knobs.offload_param.value} needs ZeRO stage 3, got stage {stage}: "
            "DeepSpeed ignores it below stage 3 and the parameters stay on the GPU"))  # fmt: skip
    device = knobs.offload_optimizer
    key = _key(config, "zero_optimization.offload_optimizer.device", "zero_optimization.cpu_offload")
    if device is not OffloadDevice.none and config.stage is ZeroStage.zero0:
        yield Finding(rule="offload-stage", severity="error", key=key, message=(
            f"offload_optimizer device {device.value} needs ZeRO stage 1, 2 or 3, got stage 0: "
            "stage 0 keeps the states on the GPU, and a DeepSpeed Adam then fails its first step with "
            "'CPUAdam param is on cuda:0 and must be 'cpu''"))  # fmt: skip
    elif device is OffloadDevice.nvme and config.stage in (ZeroStage.zero1, ZeroStage.zero2):
        yield Finding(rule="offload-stage", severity="error", key=key, message=(
            f"offload_optimizer device nvme needs ZeRO stage 3 (ZeRO-Infinity), got stage {stage}: "
            "stages 1-2 treat any offload device as cpu, so the optimizer states land in CPU memory, not NVMe"))  # fmt: skip


def check_offload_ratio(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    ratio = config.offload_optimizer_ratio
    if ratio < 1.0 and config.stage is not ZeroStage.zero3:
        yield Finding(rule="offload-ratio", severity="error", key="zero_optimization.offload_optimizer.ratio",
                      message=f"offload_optimizer.ratio {ratio:g} with ZeRO stage {int(config.stage)}: DeepSpeed "
                      "asserts 'Partial offloading only supported for ZeRO Stage 3.'")  # fmt: skip


def check_unknown_keys(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    for unknown in config.unknown_keys:
        if unknown.forbidden:
            yield Finding(rule="unknown-key", severity="warning" if unknown.value_is_auto else "error",
                          key=unknown.key, message=unknown.message)  # fmt: skip


def check_unknown_top_keys(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    for unknown in config.unknown_keys:
        if not unknown.forbidden:
            yield Finding(rule="unknown-top-key", severity="warning", key=unknown.key, message=unknown.message)


def check_removed_keys(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    for removed in config.removed_keys:
        yield Finding(rule="removed-key", severity="error", key=removed.key, message=removed.message)


def check_deprecated_keys(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    for old in config.deprecated_keys:
        if not old.conflict:
            note = f" ({old.note})" if old.note else ""
            yield Finding(rule="deprecated-key", severity="warning", key=old.key,
                          message=f"{old.key} is deprecated; use {old.replacement}{note}")  # fmt: skip


def check_deprecated_conflicts(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    for old in config.deprecated_keys:
        if old.conflict:
            yield Finding(rule="deprecated-conflict", severity="error", key=old.key, message=(
                f"Cannot provide deprecated parameter '{old.key}' and replacing parameter '{old.replacement}' "
                "together (DeepSpeed asserts)"))  # fmt: skip


def check_duplicate_keys(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    for key, line in config.duplicate_keys:
        yield Finding(rule="duplicate-key", severity="error", key=key, line=line,
                      message=duplicate_key_message(key, config.line_of(key)))  # fmt: skip


def check_auto_values(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    for auto in config.autos:
        yield Finding(rule="auto-value", severity="info", key=auto.key, message=auto.message)


def check_json_comments(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    if not config.has_comments:
        return
    for_hf = bool(config.autos)
    yield Finding(rule="json-comments", severity="warning" if for_hf else "info", message=(
        "the config has comments: DeepSpeed reads config files with hjson and accepts them, but Hugging Face "
        "Trainer/Accelerate read ds_config with json.load and fail"
        + ('; its "auto" values say it is meant for Hugging Face' if for_hf else "")))  # fmt: skip


_CONFIG = "deepspeed/runtime/config.py"
_ZERO = "deepspeed/runtime/zero/config.py"

CONFIG_RULES: tuple[Rule, ...] = (
    Rule("batch-identity", "error", "train_batch_size != micro_batch * grad_accum * dp_world, or a derived value is "
         "not whole", f"{_CONFIG} _set_batch_related_parameters, _batch_assertion", check_batch_identity),
    Rule("precision-conflict", "error", "fp16 and bf16 both enabled", f"{_CONFIG} _initialize_params",
         check_precision_conflict),
    Rule("bf16-unsupported", "error", "bf16 enabled on hardware without bf16 (V100)",
         "deepspeed/runtime/engine.py _do_sanity_check", check_bf16_hardware),
    Rule("onebit-zero", "error", "1-bit Adam, 0/1 Adam or 1-bit LAMB with ZeRO stage > 0; use ZeRO++",
         "deepspeed/runtime/engine.py _configure_basic_optimizer", check_onebit_zero),
    Rule("offload-stage", "error", "offload_param or NVMe offload below stage 3, optimizer offload at stage 0",
         f"{_ZERO} offload docs; deepspeed/runtime/zero/stage_1_and_2.py (any device = cpu)", check_offload_stage),
    Rule("offload-ratio", "error", "partial optimizer offload (ratio < 1) below stage 3",
         f"{_ZERO} offload_ratio_check", check_offload_ratio),
    Rule("unknown-key", "error", "unknown key in a section DeepSpeed validates strictly (zero_optimization, offload, "
         "fp16, bf16, compile)", "deepspeed/runtime/config_utils.py DeepSpeedConfigModel extra='forbid'",
         check_unknown_keys),
    Rule("removed-key", "error", "a block DeepSpeed 0.19.8 removed (sparse_attention, elasticity, amp, curriculum_learning, "
         "nebula, ...), which it refuses", f"{_CONFIG} _reject_removed_config_keys", check_removed_keys),
    Rule("unknown-top-key", "warning", "unknown top-level key, which DeepSpeed silently ignores",
         f"{_CONFIG} reads top-level keys with dict.get", check_unknown_top_keys),
    Rule("deprecated-key", "warning", "deprecated key, with its replacement",
         f"{_ZERO} deprecated fields; deepspeed/runtime/precision_config.py 'bfloat16'", check_deprecated_keys),
    Rule("deprecated-conflict", "error", "deprecated key given together with its replacement",
         "deepspeed/runtime/config_utils.py _process_deprecated_field", check_deprecated_conflicts),
    Rule("duplicate-key", "error", "the same key twice in one object",
         "deepspeed/runtime/config_utils.py dict_raise_error_on_duplicate_keys", check_duplicate_keys),
    Rule("auto-value", "info", 'Hugging Face "auto" value and the value assumed for it',
         "transformers/integrations/deepspeed.py HfTrainerDeepSpeedConfig", check_auto_values),
    Rule("json-comments", "info", "comments in the JSON (DeepSpeed accepts them; Hugging Face does not)",
         "deepspeed/runtime/config.py hjson.load; accelerate/utils/deepspeed.py json.load", check_json_comments),
)  # fmt: skip
