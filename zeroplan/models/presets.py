"""Model presets (configs/models/*.yaml) and user model files (YAML specs, Hugging Face config.json).

A bundled preset is answered from configs/index.json when its YAML is unchanged (models/preset_index.py);
anything else is parsed and validated by the model families.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeroplan.errors import SpecError
from zeroplan.models import preset_index
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.models.preset_index import bundled_config_dir
from zeroplan.readers import parse_json, parse_yaml, read_text, require_mapping
from zeroplan.registry import is_file, looks_like_path, preset_paths, unknown_preset
from zeroplan.validate import validated, validation_message

if TYPE_CHECKING:  # the families load on first use: a bare --params or an indexed preset never needs them
    from zeroplan.models.families import FamilyConfig, ModelSpec


def model_from_data(data: Any, origin: str, *, hf_name: str | None = None) -> ModelSpec:
    """A ModelSpec from a zeroplan YAML spec mapping, or from an HF config.json mapping (hf_name given)."""
    from pydantic import ValidationError

    from zeroplan.models.families import ModelSpec

    data = require_mapping(data, origin)
    if hf_name is not None:
        return ModelSpec(name=hf_name, source=origin, config=_family_config(data, origin, strict=False))
    body = dict(data)
    config = _family_config(require_mapping(body.pop("config", None), f"{origin}: config"), origin, strict=True)
    try:
        return ModelSpec.model_validate({**body, "config": config})
    except ValidationError as exc:
        raise SpecError(validation_message(origin, exc, ModelSpec)) from None


def _family_config(data: dict, origin: str, *, strict: bool) -> FamilyConfig:
    """The family config in `data`, and the Architecture it implies held to Architecture's bounds (a dropout of
    1.5 is no probability): every error names the file, and the key under `config:` in a YAML spec."""
    from pydantic import ValidationError

    from zeroplan.models.families import FAMILIES, parse_family_config

    try:
        config = parse_family_config(data, strict=strict)
    except ValidationError as exc:
        family = FAMILIES.get(data.get("model_type")) if isinstance(data.get("model_type"), str) else None
        raise SpecError(validation_message(origin, exc, family, prefix="config" if strict else "")) from None
    validated(Architecture, asdict(config.architecture()), origin)
    return config


def load_model_file(path: Path) -> ModelSpec:
    """A model from a zeroplan YAML spec or a Hugging Face config.json."""
    text = read_text(path)
    if path.suffix == ".json":
        return model_from_data(parse_json(text, str(path)), str(path), hf_name=path.parent.name or path.stem)
    return model_from_data(parse_yaml(text, str(path)), str(path))


def load_model(ref: str) -> ModelSpec:
    """A model by preset name, YAML spec path or HF config.json path."""
    if (path := preset_paths("models").get(ref)) is not None:
        return load_model_file(path)
    if looks_like_path(ref) or is_file(ref):
        return load_model_file(Path(ref))
    raise unknown_preset("models", ref)


def _indexed(kind: str, ref: str) -> dict[str, Any] | None:
    """The preset index's facts for `ref` when it names a bundled preset, else None.

    None for files, and for a preset of the same name in ZEROPLAN_CONFIG_DIR: it shadows the bundled one
    and is read from its YAML, as every user file is.
    """
    path = preset_paths(kind).get(ref)
    if path is None or path != bundled_config_dir() / kind / path.name:
        return None
    return preset_index.entry(kind, ref, path)


def model_facts(ref: str) -> tuple[str, ParamCount, Architecture]:
    """A model's name, exact counts and architecture: from the preset index for a bundled preset, else loaded."""
    if (facts := _indexed("models", ref)) is not None:
        return facts["name"], ParamCount(**facts["counts"]), Architecture(**facts["architecture"])
    from zeroplan.models.params import count_params

    spec = load_model(ref)
    return spec.name, count_params(spec.config), spec.architecture()


def all_models() -> list[ModelSpec]:
    return [load_model_file(p) for p in preset_paths("models").values()]
