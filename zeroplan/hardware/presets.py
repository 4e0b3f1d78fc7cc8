"""Hardware presets (configs/hardware/*.yaml) and user hardware files, validated into HardwareSpec."""

from __future__ import annotations

from pathlib import Path

from zeroplan.hardware.spec import HardwareSpec
from zeroplan.readers import parse_yaml, read_text, require_mapping
from zeroplan.registry import is_file, looks_like_path, preset_paths, unknown_preset
from zeroplan.validate import validated

DEFAULT_HARDWARE = "h100-sxm-80gb"  # what the CLI and the Python API plan on unless told: the source article's GPU


def load_hardware_file(path: Path) -> HardwareSpec:
    text = read_text(path)
    return validated(HardwareSpec, require_mapping(parse_yaml(text, str(path)), str(path)), str(path))


def load_hardware(ref: str) -> HardwareSpec:
    """A hardware profile by preset name or YAML path."""
    if (path := preset_paths("hardware").get(ref)) is not None:
        return load_hardware_file(path)
    if looks_like_path(ref) or is_file(ref):
        return load_hardware_file(Path(ref))
    raise unknown_preset("hardware", ref)


def all_hardware() -> list[HardwareSpec]:
    return [load_hardware_file(p) for p in preset_paths("hardware").values()]
