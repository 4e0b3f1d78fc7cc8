"""Read a DeepSpeed config mapping (ds_config.json) into the facts zeroplan plans with.

Follows DeepSpeed v0.19.8 (`deepspeed/runtime/config.py`, `runtime/zero/config.py`,
`runtime/precision_config.py`, `compile/config.py`) and resolves Hugging Face `"auto"` values the way
transformers' `HfTrainerDeepSpeedConfig` does (deepspeed/auto.py; huggingface/transformers
`src/transformers/integrations/deepspeed.py`). Every `"auto"` becomes an `AutoValue` naming the value assumed, so a
CI rule can report it.

Numbers: DeepSpeed configs often write 5e8; a whole-valued float is accepted as the integer it equals.
A fractional, negative, non-finite or boolean number is a SpecError naming the key. What DeepSpeed
would refuse for its *meaning* (batch identity, fp16 with bf16, ...) is left to the rules in
`check/rules/config.py`, which report every problem at once with its line.

Pure: the caller reads the text (presets.read_text), blanks comments and locates keys
(jsonsource.scan_json_text), parses the JSON (presets.parse_json) and passes the mapping here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import fields

from zeroplan.deepspeed.auto import (
    HIDDEN_SIZE_KEYS,
    AutoValue,
    added_section,
    batch_auto,
    deepspeed_default,
    hidden_size_auto,
    precision_auto,
)
from zeroplan.deepspeed.compile_block import read_compile_block
from zeroplan.deepspeed.config import DeepSpeedConfig, DType  # noqa: F401 - re-exported: callers import them from here
from zeroplan.deepspeed.keys import find_deprecated_keys, find_unknown_keys
from zeroplan.deepspeed.removed import find_removed_keys
from zeroplan.errors import SpecError
from zeroplan.jsonsource import JsonSource
from zeroplan.memory.setup import (
    DS_ALLGATHER_BUCKET_SIZE,
    DeepSpeedKnobs,
    OffloadDevice,
    TrainingSetup,
    ZeroStage,
)

# DeepSpeed's DtypeEnum spellings (runtime/config.py) for data_types.grad_accum_dtype.
_DTYPE_SPELLINGS: dict[str, DType] = {
    **dict.fromkeys(("fp16", "float16", "half", "torch.float16"), "fp16"),
    **dict.fromkeys(("bf16", "bfloat16", "torch.bfloat16"), "bf16"),
    **dict.fromkeys(("fp32", "float32", "float", "torch.float32"), "fp32"),
}
_COMM_DTYPES: tuple[DType, ...] = ("fp16", "bf16", "fp32")  # get_communication_data_type, case-insensitive


def _show(value: object) -> str:
    """A value as the user wrote it in JSON; YAML-only types (dates) fall back to str."""
    return json.dumps(value, default=str)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_ds_config(
    data: object,
    *,
    origin: str = "ds_config.json",
    source: JsonSource | None = None,
    hidden_size: int | None = None,
    setup: TrainingSetup | None = None,
    dp_world: int | None = None,
    assumed: frozenset[str] = frozenset(),
) -> DeepSpeedConfig:
    """A DeepSpeedConfig from a parsed ds_config mapping.

    hidden_size resolves the hidden-size `"auto"` keys (h^2, int(0.9 h^2), 10 h); setup and dp_world
    resolve the batch and precision ones (train_batch_size = dp_world * micro_batch * grad_accum).
    assumed names the setup fields that are zeroplan's defaults, not stated anywhere: the AutoValues say so.
    Raises SpecError ('origin: key.path: reason') on a value DeepSpeed's parser would reject.
    """
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(f"{origin}: expected a JSON object of DeepSpeed keys, got {kind}")
    return _Reader(origin, hidden_size, setup, dp_world, assumed).read(data, source)


class _Reader:
    """One parse: the inputs that resolve `"auto"`, and the AutoValues recorded on the way."""

    def __init__(self, origin: str, hidden_size: int | None, setup: TrainingSetup | None, dp_world: int | None,
                 assumed: frozenset[str]):  # fmt: skip
        self.origin, self.hidden_size, self.setup, self.dp_world = origin, hidden_size, setup, dp_world
        self.assumed = assumed
        self.autos: list[AutoValue] = []
        self.knob_keys: dict[str, str] = {}
        self.stage = ZeroStage.zero0

    def read(self, data: Mapping, source: JsonSource | None) -> DeepSpeedConfig:
        zero = self.zero_section(data)
        self.stage = self.read_stage(zero)
        # precision_config.get_bfloat16_config: "bf16" unless it is absent or null, then "bfloat16"
        bf16_section = "bfloat16" if data.get("bf16") is None and "bfloat16" in data else "bf16"
        bf16 = self.mapping(data, bf16_section)
        read_compile_block(self.mapping(data, "compile"), self.origin)
        knobs = self.knobs(zero)
        fp16_enabled, bf16_enabled = self.precision(data, bf16_section)
        return DeepSpeedConfig(
            origin=self.origin,
            stage=self.stage,
            fp16_enabled=fp16_enabled,
            bf16_enabled=bf16_enabled,
            bf16_section=bf16_section,
            bf16_master_weights_and_grads=self.flag(bf16, f"{bf16_section}.bf16_master_weights_and_grads", False),
            bf16_optimizer_states=self.flag(bf16, f"{bf16_section}.bf16_optimizer_states", False),
            **self.batch(data),
            optimizer_type=self.optimizer_type(data),
            communication_data_type=self.comm_dtype(data),
            grad_accum_dtype=self.grad_accum_dtype(data),
            knobs=knobs,
            knob_keys=self.knob_keys,
            offload_optimizer_ratio=self.offload_ratio(zero),
            autos=tuple(self.autos),
            unknown_keys=find_unknown_keys(data),
            removed_keys=find_removed_keys(data),
            deprecated_keys=find_deprecated_keys(data),
            duplicate_keys=source.duplicate_keys if source else (),
            has_comments=source.has_comments if source else False,
            key_lines=dict(source.key_lines) if source else {},
            **self.pipeline(data),
        )

    def pipeline(self, data: Mapping) -> dict:
        """PipelineEngine's stages and what reading them assumed (deepspeed.parallel)."""
        from zeroplan.deepspeed.parallel import pipeline_notes, pipeline_stages

        try:
            return {"pipeline_stages": pipeline_stages(data), "pipeline_notes": pipeline_notes(data)}
        except SpecError as exc:
            raise SpecError(f"{self.origin}: {exc}") from None

    # --- value checks -------------------------------------------------------------------------

    def error(self, path: str, reason: str) -> SpecError:
        return SpecError(f"{self.origin}: {path}: {reason}")

    def whole(self, value: object, path: str, minimum: int = 0) -> int:
        """A whole number: an int, or a float that equals one (5e8). Never a bool, NaN or infinity."""
        if isinstance(value, str) and _is_number(value):
            hint = "drop the quotes; YAML reads 5e8 as a string, write 5.0e+8"
            raise self.error(path, f"expected a number, got the string {_show(value)} ({hint})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(path, f"expected a whole number, got {_show(value)}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.error(path, f"must be a finite number, got {value}")
            if not value.is_integer():
                raise self.error(path, f"must be a whole number, got {value!r}")
            value = int(value)
        if value < minimum:
            raise self.error(path, f"must be >= {minimum}, got {value}")
        return value

    def flag(self, section: Mapping, path: str, default: bool | None) -> bool | None:
        key = path.rsplit(".", 1)[-1]
        value = section.get(key, default)
        if value == "auto":
            return self.fallback(path, default)
        if value is not None and not isinstance(value, bool):
            raise self.error(path, f"expected true or false, got {_show(value)}")
        return value

    def mapping(self, data: Mapping, path: str) -> Mapping:
        value = data.get(path.rsplit(".", 1)[-1])
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(path, f"expected an object, got {_show(value)}")
        return value

    # --- "auto" -------------------------------------------------------------------------------

    def record(self, auto: AutoValue) -> int | bool | None:
        self.autos.append(auto)
        return auto.value

    def fallback(self, path: str, default: int | bool | None) -> int | bool | None:
        return self.record(deepspeed_default(path, default))

    # --- sections -----------------------------------------------------------------------------

    def zero_section(self, data: Mapping) -> Mapping:
        zero = data.get("zero_optimization")
        if isinstance(zero, bool):  # legacy format: read_zero_config_deprecated
            legacy = {"stage": int(zero)}
            if zero:
                legacy["allgather_bucket_size"] = data.get("allgather_size", DS_ALLGATHER_BUCKET_SIZE)
            return legacy
        return self.mapping(data, "zero_optimization")

    def read_stage(self, zero: Mapping) -> ZeroStage:
        value = zero.get("stage", 0)
        if value == "auto":
            return ZeroStage(self.fallback("zero_optimization.stage", 0))
        stage = self.whole(value, "zero_optimization.stage")
        if stage > ZeroStage.zero3:
            raise self.error("zero_optimization.stage", f"must be 0, 1, 2 or 3, got {stage}")
        return ZeroStage(stage)

    def enabled(self, data: Mapping, section: str) -> bool:
        body = self.mapping(data, section)
        if body.get("enabled") == "auto":
            return self.record(precision_auto(section, self.setup, self.assumed))
        return bool(self.flag(body, f"{section}.enabled", False))

    def precision(self, data: Mapping, bf16_section: str) -> tuple[bool, bool]:
        """fp16.enabled and bf16.enabled as the run has them: as written, "auto" filled from the setup, and the
        section Accelerate adds (auto.added_section) to a config that leaves its precision to the trainer."""
        fp16, bf16 = self.enabled(data, "fp16"), self.enabled(data, bf16_section)
        left_open = any(self.mapping(data, section).get("enabled") == "auto" for section in ("fp16", bf16_section))
        if self.setup is None or not left_open or fp16 or bf16:
            return fp16, bf16
        if "fp16" not in data and (auto := added_section("fp16", self.setup, self.assumed)):
            return self.record(auto), bf16
        if "bf16" not in data and "bfloat16" not in data and (auto := added_section("bf16", self.setup, self.assumed)):
            return fp16, self.record(auto)
        return fp16, bf16

    def batch(self, data: Mapping) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"):
            raw = data.get(key)
            if raw == "auto":
                out[key] = self.record(batch_auto(key, self.setup, self.dp_world, self.assumed))
            else:
                out[key] = None if raw is None else self.whole(raw, key, minimum=1)
        return out

    def optimizer_type(self, data: Mapping) -> str | None:
        kind = self.mapping(data, "optimizer").get("type")
        if kind is not None and not isinstance(kind, str):
            raise self.error("optimizer.type", f"expected a name, got {_show(kind)}")
        return kind

    def comm_dtype(self, data: Mapping) -> DType | None:
        value = data.get("communication_data_type")
        if value is None:
            return None
        if not isinstance(value, str) or value.lower() not in _COMM_DTYPES:
            raise self.error(
                "communication_data_type",
                f"Invalid communication_data_type. Supported data types: {list(_COMM_DTYPES)}. Got: {value}",
            )
        return value.lower()

    def grad_accum_dtype(self, data: Mapping) -> DType | None:
        value = self.mapping(data, "data_types").get("grad_accum_dtype")
        if value is None:
            return None
        if value not in _DTYPE_SPELLINGS:
            raise self.error("data_types.grad_accum_dtype", f"expected fp32, fp16 or bf16, got {_show(value)}")
        return _DTYPE_SPELLINGS[value]

    def knobs(self, zero: Mapping) -> DeepSpeedKnobs:
        ints = {
            field: self.zero_int(zero, field, spellings, KNOB_DEFAULTS[field], minimum)
            for field, spellings, minimum in _KNOB_INTS
        }
        flags = {field: self.flag(zero, f"zero_optimization.{field}", None) for field in _KNOB_FLAGS}
        return DeepSpeedKnobs(
            **ints,
            **{field: value for field, value in flags.items() if value is not None},
            overlap_comm=self.flag(zero, "zero_optimization.overlap_comm", None),
            zero_hpz_partition_size=max(self.zero_int(zero, "zero_hpz_partition_size", ("zero_hpz_partition_size",),
                                                      1, 0), 1),  # fmt: skip
            offload_optimizer=self.offload_device(zero, "offload_optimizer", "cpu_offload"),
            offload_param=self.offload_device(zero, "offload_param", "cpu_offload_param"),
        )

    def zero_int(self, zero: Mapping, field: str, spellings: tuple[str, ...], default: int, minimum: int) -> int:
        key = next((s for s in spellings if s in zero), None)
        if key is None:
            return default
        self.knob_keys[field] = key
        if zero[key] == "auto" and key in HIDDEN_SIZE_KEYS:
            return self.record(hidden_size_auto(key, self.hidden_size, self.stage is ZeroStage.zero3, default))
        if zero[key] == "auto":
            return self.fallback(f"zero_optimization.{key}", default)
        return self.whole(zero[key], f"zero_optimization.{key}", minimum)

    def offload_device(self, zero: Mapping, section: str, deprecated: str) -> OffloadDevice:
        path = f"zero_optimization.{section}"
        body = self.mapping(zero, path)
        if section not in zero and zero.get(deprecated) is True:
            return OffloadDevice.cpu  # the deprecated boolean maps to {device: cpu}
        device = body.get("device", "none")
        if device == "auto":
            return OffloadDevice(self.fallback(f"{path}.device", "none"))
        if not isinstance(device, str) or device not in OffloadDevice._value2member_map_:
            raise self.error(f"{path}.device", f"expected none, cpu or nvme, got {_show(device)}")
        return OffloadDevice(device)

    def offload_ratio(self, zero: Mapping) -> float:
        path = "zero_optimization.offload_optimizer.ratio"
        value = self.mapping(zero, "zero_optimization.offload_optimizer").get("ratio", 1.0)
        if value == "auto":
            return self.fallback(path, 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise self.error(path, f"expected a number from 0 to 1, got {_show(value)}")
        return float(value)


# DeepSpeedKnobs integer fields: (field, accepted spellings with the alias first, minimum). The minimums are
# DeepSpeed v0.19.8's bounds (runtime/zero/config.py): reduce_bucket_size gt=0 (ge=0 through 0.19.5), the
# others ge=0. sub_group_size 0 makes every parameter its own ZeRO-3 sub-group (stage3.py _create_fp16_sub_groups).
_KNOB_INTS = (
    ("reduce_bucket_size", ("reduce_bucket_size",), 1),
    ("allgather_bucket_size", ("allgather_bucket_size",), 0),
    ("stage3_prefetch_bucket_size", ("stage3_prefetch_bucket_size", "prefetch_bucket_size"), 0),
    ("stage3_param_persistence_threshold", ("stage3_param_persistence_threshold", "param_persistence_threshold"), 0),
    ("stage3_model_persistence_threshold", ("stage3_model_persistence_threshold", "model_persistence_threshold"), 0),
    ("stage3_max_live_parameters", ("stage3_max_live_parameters", "max_live_parameters"), 0),
    ("sub_group_size", ("sub_group_size",), 0),
)
_KNOB_FLAGS = ("contiguous_gradients", "zero_quantized_weights", "zero_quantized_gradients")
KNOB_DEFAULTS = {f.name: f.default for f in fields(DeepSpeedKnobs)}  # DeepSpeed's code defaults
