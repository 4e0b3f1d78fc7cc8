"""A `--from` file: read (through zeroplan.readers), its kind recognised by its keys, and the DeepSpeed config it names found.

Recognition looks for keys only one kind writes; a file with none, or with keys of two kinds, is an error
that asks for `--from-kind`. A DeepSpeed path is relative to the file's folder, else to the working directory
(LLaMA-Factory's `examples/deepspeed/...` and axolotl's `deepspeed_configs/...` are relative to the repository
root the tool runs from); which one was used is said in the assumptions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import KIND_NAMES, FromKind
from zeroplan.frameworks.run import FrameworkRun
from zeroplan.readers import parse_yaml, read_text, require_mapping

# Keys that mark each kind: written by that tool's files and by neither other kind's.
MARKERS = {
    FromKind.accelerate: ("distributed_type", "compute_environment", "main_training_function", "num_processes",
                          "num_machines", "machine_rank", "deepspeed_config", "parallelism_config", "mixed_precision"),
    FromKind.llamafactory: ("model_name_or_path", "finetuning_type", "cutoff_len", "lora_target", "template",
                            "per_device_train_batch_size", "dist_config", "model_class", "quantization_bit"),
    FromKind.axolotl: ("base_model", "sequence_len", "adapter", "lora_target_modules", "lora_target_linear", "datasets",
                       "load_in_4bit", "load_in_8bit", "unfrozen_parameters"),
}  # fmt: skip


def recognise(data: Mapping, origin: str) -> FromKind:
    """The one kind whose marking keys the file has; SpecError naming what was found otherwise."""
    found = {kind: [k for k in keys if k in data] for kind, keys in MARKERS.items()}
    kinds = [kind for kind, keys in found.items() if keys]
    force = "pass --from-kind accelerate|llamafactory|axolotl"
    if len(kinds) == 1:
        return kinds[0]
    if not kinds:
        raise SpecError(f"{origin}: not an Accelerate, LLaMA-Factory or axolotl config (none of distributed_type, "
                        f"model_name_or_path, finetuning_type, base_model, sequence_len); {force}")  # fmt: skip
    both = " and ".join(f"{KIND_NAMES[k]} ({', '.join(found[k])})" for k in kinds)
    raise SpecError(f"{origin}: has keys of {both}; {force}")


def _readers() -> dict[FromKind, Callable[[Mapping, str], FrameworkRun]]:
    from zeroplan.frameworks.accelerate import read_accelerate
    from zeroplan.frameworks.axolotl import read_axolotl
    from zeroplan.frameworks.llamafactory import read_llamafactory

    return {FromKind.accelerate: read_accelerate, FromKind.llamafactory: read_llamafactory, FromKind.axolotl: read_axolotl}


def read_framework_file(path: Path, kind: FromKind | None = None) -> FrameworkRun:
    """The run a framework file describes, its kind recognised unless given."""
    origin = str(path)
    data = require_mapping(parse_yaml(read_text(path), origin), origin)
    return _readers()[kind or recognise(data, origin)](data, origin)


def find_deepspeed_config(written: str, origin: str, key: str) -> tuple[Path, str]:
    """The DeepSpeed config a file names, and where it was found: beside the file, else in the working directory."""
    path = Path(written)
    if path.is_absolute():
        return path, "an absolute path"
    beside = Path(os.path.normpath(Path(origin).parent / path))  # ../ resolved, as the path is shown
    if beside.exists():
        return beside, "relative to the file's folder"
    if path.exists():
        return path, "relative to the working directory; not beside the file"
    raise SpecError(f"{origin}: {key}: {written}: not found beside the file ({beside}) nor in the working "
                    "directory; run from the folder it is relative to, or give --deepspeed-config PATH")  # fmt: skip
