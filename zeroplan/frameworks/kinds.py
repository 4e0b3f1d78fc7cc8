"""The kinds of file `--from` reads, by name (`--from-kind`). Import-light: the CLI reads it at start-up."""

from enum import Enum


class FromKind(str, Enum):
    accelerate = "accelerate"
    llamafactory = "llamafactory"
    axolotl = "axolotl"
    trl = "trl"
    swift = "swift"
    torchtune = "torchtune"
    torchtitan = "torchtitan"
    litgpt = "litgpt"


TOOL_NAMES = {FromKind.accelerate: "Accelerate", FromKind.llamafactory: "LLaMA-Factory", FromKind.axolotl: "axolotl",
              FromKind.trl: "TRL", FromKind.swift: "ms-swift", FromKind.torchtune: "torchtune",
              FromKind.torchtitan: "torchtitan", FromKind.litgpt: "litgpt"}  # fmt: skip
WHAT = {FromKind.accelerate: "launcher config", FromKind.llamafactory: "training YAML", FromKind.axolotl: "YAML",
        FromKind.trl: "TrainingArguments YAML (TRL CLI, alignment-handbook)", FromKind.swift: "YAML",
        FromKind.torchtune: "recipe YAML", FromKind.torchtitan: "job TOML", FromKind.litgpt: "finetune YAML"}  # fmt: skip
KIND_NAMES = {kind: f"{name} config" for kind, name in TOOL_NAMES.items()}


def kinds_sentence() -> str:
    """The file kinds --from reads, in words (README's "What is modelled" holds the same sentence: a test checks it)."""
    return "; ".join(f"{TOOL_NAMES[kind]} {WHAT[kind]}" for kind in FromKind)
