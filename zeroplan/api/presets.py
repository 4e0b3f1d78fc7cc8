"""Models and hardware: exact parameter counts, the presets' names, a model or hardware profile loaded."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeroplan.api.arguments import typed
from zeroplan.errors import ZeroplanError
from zeroplan.hardware import presets as hardware_presets
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.models import presets as model_presets
from zeroplan.models.architecture import ParamCount
from zeroplan.registry import preset_names

if TYPE_CHECKING:
    from zeroplan.models.families import FamilyConfig, ModelSpec


@typed
def count_params(model: str | Path | Mapping[str, Any] | ModelSpec | FamilyConfig) -> ParamCount:
    """Exact parameter counts, as transformers builds the model: `.num_params`, `.num_embedding_params`,
    `.largest_layer_params` (DeepSpeed's definition), `.num_active_params` (MoE: top-k experts).

    `model`: a preset name, a YAML spec or HF config.json path, a mapping (an HF config.json's contents, with
    `model_type`, or a zeroplan spec, with `config`), or a loaded ModelSpec.
    """
    if isinstance(model, (str, Path)):
        return model_presets.model_facts(str(model))[1]
    from zeroplan.models.families import FamilyConfig, ModelSpec
    from zeroplan.models.hf import HFModel
    from zeroplan.models.params import count_params as count

    if isinstance(model, Mapping):
        model = _model_from_mapping(model)
    if not isinstance(model, (ModelSpec, FamilyConfig, HFModel)):
        raise ZeroplanError(f"count_params takes a preset name, a model file path, a config mapping or a ModelSpec, "
                            f"not {type(model).__name__}")  # fmt: skip
    return count(model)


@typed
def model_names() -> list[str]:
    """The model presets' names, sorted (`zeroplan models`)."""
    return preset_names("models")


@typed
def hardware_names() -> list[str]:
    """The hardware presets' names, sorted (`zeroplan hardware`)."""
    return preset_names("hardware")


@typed
def load_model(name: str | Path) -> ModelSpec:
    """A model by preset name, YAML spec path or HF config.json path: `.name`, `.source`, `.config` (HF keys),
    `.architecture()`."""
    return model_presets.load_model(str(name))


@typed
def load_hardware(name: str | Path) -> HardwareSpec:
    """A hardware profile by preset name or YAML path: `.memory_gib`, `.bf16_tflops`, `.source`, ..."""
    return hardware_presets.load_hardware(str(name))


def _model_from_mapping(data: Mapping[str, Any]) -> ModelSpec:
    """An HF config.json's contents (it has `model_type`) or a zeroplan YAML spec (it has `config`)."""
    if "config" in data:
        return model_presets.model_from_data(dict(data), "model mapping")
    name = str(data.get("_name_or_path") or data.get("model_type") or "model")
    return model_presets.model_from_data(dict(data), "config mapping", hf_name=name)
