"""The `compile` block, validated as DeepSpeed v0.19.8 validates it.

DeepSpeed v0.19.8 `deepspeed/runtime/config.py` builds `CompileConfig(**param_dict.get('compile', {}))`, a
`DeepSpeedConfigModel` (`deepspeed/compile/config.py`): pydantic in its default (lax) mode, `"auto"` values
dropped first, `extra="forbid"`. The fields and defaults below are that model's. Unknown keys are reported
by the `unknown-key` rule (keys.COMPILE_KEYS), so this model ignores them and checks the values only.
`{"disable": false, "backend": "inductor"}` (axolotl's torch-compile configs) names no field at all: DeepSpeed
refuses it (docs/deepspeed.md).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from zeroplan.errors import SpecError
from zeroplan.validate import validation_message

FREE_ACTIVATION_THRESHOLD = 10 * 1024 * 1024  # CompileConfig.free_activation_threshold default, bytes


class CompileBlock(BaseModel):
    """DeepSpeed's CompileConfig fields, with its defaults."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    deepcompile: bool = False
    autoep_non_moe: bool = False
    free_activation: bool = False
    free_activation_threshold: int = FREE_ACTIVATION_THRESHOLD
    offload_activation: bool = False
    offload_activation_pin_memory: bool = True
    offload_opt_states: bool = False
    double_buffer: bool = True
    symmetric_memory: bool = False
    debug_log: bool = False
    offload_parameters: bool = False
    sync_before_reduce: bool = False
    sync_after_reduce: bool = False
    sync_before_allgather: bool = False
    sync_after_allgather: bool = False
    keep_int_input_tensors: bool = True
    keep_all_input_tensors: bool = False
    passes: list[Literal["z1", "z3", "autosp", "autotp"]] | None = None


def read_compile_block(body: Mapping, origin: str) -> CompileBlock:
    """The block's values as DeepSpeed reads them; SpecError ('origin: compile.key: reason') on one it refuses."""
    try:
        return CompileBlock.model_validate({k: v for k, v in body.items() if v != "auto"})
    except ValidationError as exc:
        raise SpecError(validation_message(origin, exc, CompileBlock, prefix="compile")) from None
