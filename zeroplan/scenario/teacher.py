"""--teacher: knowledge distillation's teacher model, resolved as --model is (a preset, a YAML spec, an HF
config.json or a Hub id), for memory.teacher."""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.memory.teacher import Teacher
from zeroplan.printable import printable


def teacher_of(ref: str | None) -> Teacher | None:
    """The teacher `ref` names, or None; its exact count and architecture as --model's."""
    if not ref:
        return None
    from zeroplan.models.presets import model_facts

    try:
        name, counts, arch = model_facts(ref)
    except ZeroplanError as exc:
        raise ZeroplanError(f"--teacher: {exc}") from None
    return Teacher(printable(name), counts.num_params, arch)
