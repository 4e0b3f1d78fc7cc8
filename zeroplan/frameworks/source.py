"""A `--from` file: read (through zeroplan.readers; a .toml file through tomllib), its kind recognised by its keys
(frameworks/recognise.py), the keys it did not use listed (frameworks/unused.py), and the DeepSpeed config it names found. A DeepSpeed path is relative to the file's folder, else to the working directory
(LLaMA-Factory's `examples/deepspeed/...` and axolotl's `deepspeed_configs/...` are relative to the repository
root the tool runs from); which one was used is said in the assumptions.
"""

from __future__ import annotations

import os
from dataclasses import replace
from collections.abc import Callable, Mapping
from pathlib import Path

from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.recognise import recognise
from zeroplan.frameworks.unused import unused_keys
from zeroplan.frameworks.run import FrameworkRun
from zeroplan.readers import parse_json, parse_toml, parse_yaml, read_text, require_mapping

def _readers() -> dict[FromKind, Callable[[Mapping, str], FrameworkRun]]:
    from zeroplan.frameworks.accelerate import read_accelerate
    from zeroplan.frameworks.axolotl import read_axolotl
    from zeroplan.frameworks.litgpt import read_litgpt
    from zeroplan.frameworks.llamafactory import read_llamafactory
    from zeroplan.frameworks.swift import read_swift
    from zeroplan.frameworks.torchtitan import read_torchtitan
    from zeroplan.frameworks.torchtune import read_torchtune
    from zeroplan.frameworks.trl import read_trl

    return {FromKind.accelerate: read_accelerate, FromKind.llamafactory: read_llamafactory, FromKind.axolotl: read_axolotl,
            FromKind.trl: read_trl, FromKind.swift: read_swift, FromKind.torchtune: read_torchtune,
            FromKind.torchtitan: read_torchtitan, FromKind.litgpt: read_litgpt}  # fmt: skip


def read_framework_file(path: Path, kind: FromKind | None = None) -> FrameworkRun:
    """The run a framework file describes, its kind recognised unless given, with the keys it did not use."""
    origin = str(path)
    if path.suffix == ".toml":
        data, found = parse_toml(read_text(path), origin), FromKind.torchtitan
        if kind not in (None, FromKind.torchtitan) or not TITAN_SECTIONS & set(data):
            raise SpecError(f"{origin}: a TOML file zeroplan reads as a torchtitan job config only (sections "
                            f"{', '.join(sorted(TITAN_SECTIONS))})")  # fmt: skip
    else:
        text = read_text(path)  # a .json file as JSON: its error names JSON's line, not YAML's leniency
        data = require_mapping(parse_json(text, origin) if path.suffix == ".json" else parse_yaml(text, origin), origin)
        found = kind or recognise(data, origin)
        if found is FromKind.torchtitan:
            raise SpecError(f"{origin}: a torchtitan job config is TOML; give the .toml file")
    run = _readers()[found](data, origin)
    return replace(run, unused=unused_keys(run, data, _checked(found)))


def deepspeed_configs(paths: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(the DeepSpeed config JSON files among `paths`, the others): a ds_config.json given as --from is read as
    --deepspeed-config; a file that cannot be read is left to read_framework_file's one-line error."""
    from zeroplan.frameworks.recognise import is_deepspeed_config

    found, rest = [], []
    for path in paths:
        try:  # by its keys, whatever its suffix (open-instruct's are .conf): JSON, else YAML, which reads JSON too
            text = read_text(Path(path))
            data = None if path.endswith(".toml") else parse_json(text, path) if text.lstrip().startswith("{") else None
        except SpecError:
            data = None
        (found if is_deepspeed_config(data) else rest).append(path)
    return found, rest


def _checked(kind: FromKind) -> frozenset[str]:
    """The top-level keys a kind's reader checks (its pydantic model's fields, and the keys it refuses by name)."""
    from zeroplan.frameworks import accelerate, axolotl, litgpt, llamafactory, llamafactory_v1, swift, torchtitan, torchtune, trl

    models = {FromKind.accelerate: (accelerate.AccelerateKeys,), FromKind.axolotl: (axolotl.AxolotlKeys,),
              FromKind.llamafactory: (llamafactory.LlamaFactoryKeys, llamafactory_v1.LlamaFactoryV1Keys),
              FromKind.trl: (trl.TrlKeys,), FromKind.swift: (swift.SwiftKeys,), FromKind.torchtune: (torchtune.TorchtuneKeys,),
              FromKind.torchtitan: (torchtitan.TitanKeys,), FromKind.litgpt: (litgpt.LitgptKeys,)}  # fmt: skip
    checked = {FromKind.torchtitan: ("compile.enable", "compile.components", "quantize.linear", "model.converters",
                                     "model.name", "model.flavor", "optimizer.name"),  # read where they are set
               FromKind.llamafactory: tuple(llamafactory.CHANGES_MEMORY)}  # refused where true
    return frozenset(name for model in models[kind] for name in model.model_fields) | frozenset(checked.get(kind, ()))


TITAN_SECTIONS = frozenset({"job", "training", "parallelism", "model", "activation_checkpoint"})


MAX_FOLDERS_UP = 16  # how far above a training file its repository's root is looked for


def find_deepspeed_config(written: str, origin: str, key: str) -> tuple[Path, str]:
    """The DeepSpeed config a file names, and where it was found: beside the file, else in the working directory,
    else in a folder above the file (the repository's root its tool runs from)."""
    path = Path(written)
    if path.is_absolute():
        return path, "an absolute path"
    beside = Path(os.path.normpath(Path(origin).parent / path))  # ../ resolved, as the path is shown
    if os.path.exists(beside):  # os.path's: False, not an OSError, for a name the OS refuses (too long, a NUL)
        return beside, "relative to the file's folder"
    if os.path.exists(written):
        return path, "relative to the working directory; not beside the file"
    # LLaMA-Factory's and axolotl's examples name it from the repository's root, where their CLIs run
    # (examples/deepspeed/ds_z3_config.json, deepspeed_configs/zero3_bf16.json): a folder above the file
    for above in list(Path(os.path.abspath(origin)).parents)[1:MAX_FOLDERS_UP + 1]:
        if os.path.exists(above / path):
            return above / path, f"relative to {above}, a folder above the file (where its tool runs from)"
    raise SpecError(f"{origin}: {key}: {written}: not found beside the file ({beside}), in the working "
                    "directory nor in a folder above the file; run from the folder it is relative to, or give "
                    "--deepspeed-config PATH")  # fmt: skip
