"""Counts past any real run, refused up front with the bound named, before any work sized by them (a search over
the divisors of 10^18 GPUs, a timeline of a billion layers): docs/hardening.md, "Bounds". Also an option typed
with nothing in it (`--adapter-config ''`, `--freeze ,`): a usage error, never the option silently left out.

The CLI's error boundary (cli/common.py `run`) and the Python API (api/arguments.py) check the options typed;
a model file's counts are held by zeroplan.validate.check_model_counts where the file is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.printable import brief
from zeroplan.units import MAX_COUNT, CountTooLargeError, parse_count
from zeroplan.validate import (
    MAX_BATCH,
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_LORA_RANK,
    MAX_MODEL_COUNTS,
    MAX_SEQ_LEN,
)

MAX_LAYERS = MAX_MODEL_COUNTS["num_hidden_layers"]

OPTION_BOUNDS = {
    "gpus": MAX_GPUS, "nodes": MAX_GPUS, "tp": MAX_GPUS, "pp": MAX_LAYERS, "cp": MAX_GPUS, "ep": MAX_GPUS,
    "vpp": MAX_LAYERS, "pp_first_layers": MAX_LAYERS, "pp_last_layers": MAX_LAYERS, "seq_len": MAX_SEQ_LEN,
    "micro_batch": MAX_BATCH, "grad_accum": MAX_BATCH, "max_micro_batch": MAX_BATCH, "global_batch": MAX_GLOBAL_BATCH,
    "lora_rank": MAX_LORA_RANK,
}  # fmt: skip


# Options that name a file to write: "needs a file path" (the other options: "needs a value").
WRITTEN = frozenset({"html", "emit_deepspeed", "emit_accelerate", "emit_torchtitan", "output", "save"})
# The options whose flag is not their name's (cli/options.py): the message names the flag typed.
FLAGS = {"from_file": "--from", "fmt": "--format", "assignments": "--set", "checkpointings": "--checkpointing",
         "offload_optimizers": "--offload-optimizer", "offload_params": "--offload-param",
         "plans": "a plan argument", "records": "a record argument"}  # fmt: skip (the last two: check's, calibrate's)


def check_bounds(values: Mapping[str, Any], given: Set[str]) -> None:
    """UsageError for an option typed blank; ZeroplanError for the first count typed past its bound (a count that
    does not parse is left to its own check, unless it is too long to parse: then it is past the bound too)."""
    check_blank(values, given)
    for name, bound in OPTION_BOUNDS.items():
        value = values.get(name)
        if name not in given or value is None or isinstance(value, bool):
            continue
        try:
            count = value if isinstance(value, int) else parse_count(str(value))
        except CountTooLargeError:
            raise ZeroplanError(f"--{name.replace('_', '-')} {_shown(value)} is past any real run (at most "
                                f"{bound:,})") from None
        except ZeroplanError:
            continue
        if count > bound:
            raise ZeroplanError(f"--{name.replace('_', '-')} {_shown(count)} is past any real run (at most {bound:,})")


def check_blank(values: Mapping[str, Any], given: Set[str]) -> None:
    """UsageError for an option typed with nothing in it: '', spaces, or a comma list of nothing (',' for --freeze,
    --sweep, --stages); an empty list for a list option. Left alone, each was dropped or misread as no option."""
    for name in sorted(given):
        value = values.get(name)
        flag = FLAGS.get(name, "--" + name.replace("_", "-"))
        if isinstance(value, str) and not value.strip(" \t\n,"):
            what = "a file path" if name in WRITTEN else "a value"
            raise UsageError(f"{flag} needs {what}, got {value!r}")
        if isinstance(value, (list, tuple)):
            blank = [v for v in value if isinstance(v, str) and not v.strip(" \t\n,")]
            if blank or not value:
                raise UsageError(f"{flag} needs a value, got {blank[0] if blank else value!r}")


def _shown(value: object) -> str:
    """A count as typed or given: grouped digits, a long text cut, an int too long to print by its size."""
    if isinstance(value, int):
        return f"{value:,}" if value.bit_length() <= MAX_COUNT.bit_length() else brief(value)
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text):,} characters)"
