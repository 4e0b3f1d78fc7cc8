"""The files a command writes, checked against each other and against the files it reads, before any work: two
options on one file (the second write would replace the first, or fail after it) or an output over an input (--force
would destroy it) is a usage error, exit 2 (docs/hardening.md, "Edges")."""

from __future__ import annotations

import os

from zeroplan.errors import UsageError

# The options that write a file, and those that name a file the command reads (positional plans and records too).
OUTPUTS = {"html": "--html", "emit_deepspeed": "--emit-deepspeed", "emit_accelerate": "--emit-accelerate",
           "emit_torchtitan": "--emit-torchtitan", "output": "--output", "save": "--save"}
INPUTS = {"model": "--model", "hardware": "--hardware", "deepspeed_config": "--deepspeed-config", "from_file": "--from",
          "calibration": "--calibration", "adapter_config": "--adapter-config", "policy_file": "--policy-file",
          "teacher": "--teacher", "plan": "--plan", "plans": "a plan", "records": "a record"}  # fmt: skip


def check_outputs(params: dict, given: frozenset[str]) -> None:
    """UsageError, before any work, for two options writing one file (the second would replace the first, or fail
    after it was written) and for an output that is a file the command reads (--force would destroy the input)."""
    written: dict[str, str] = {}
    for name, option in OUTPUTS.items():
        value = params.get(name)
        if name not in given or value is None or not str(value).strip() or "\x00" in str(value):
            continue  # blank: check_blank's; a NUL: the writer's own refusal (realpath raises ValueError on it)
        key = os.path.realpath(str(value))
        if key in written:
            raise UsageError(f"{written[key]} and {option} both write {value}; give each its own file")
        written[key] = option
    for name, option in INPUTS.items():
        values = params.get(name)
        for value in values if isinstance(values, (list, tuple)) else [values]:
            if value is None or "\x00" in str(value) or not os.path.isfile(str(value)):
                continue
            key = os.path.realpath(str(value))
            if key in written:
                raise UsageError(f"{written[key]} {value} is {option} this command reads; refusing to write over an "
                                 "input, even with --force")
