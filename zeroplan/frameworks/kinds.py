"""The kinds of file `--from` reads, by name (`--from-kind`). Import-light: the CLI reads it at start-up."""

from enum import Enum


class FromKind(str, Enum):
    accelerate = "accelerate"
    llamafactory = "llamafactory"
    axolotl = "axolotl"


TOOL_NAMES = {FromKind.accelerate: "Accelerate", FromKind.llamafactory: "LLaMA-Factory", FromKind.axolotl: "axolotl"}
KIND_NAMES = {kind: f"{name} config" for kind, name in TOOL_NAMES.items()}
