"""Counts past any real run, refused up front with the bound named, before any work sized by them (a search over
the divisors of 10^18 GPUs, a timeline of a billion layers): docs/hardening.md, "Bounds".

The CLI's error boundary (cli/common.py `run`) and the Python API (api/arguments.py) check the options typed;
a model file's counts are held by zeroplan.validate.check_model_counts where the file is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from zeroplan.errors import ZeroplanError
from zeroplan.units import parse_count
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


def check_bounds(values: Mapping[str, Any], given: Set[str]) -> None:
    """ZeroplanError for the first count typed past its bound; a count that does not parse is left to its own check."""
    for name, bound in OPTION_BOUNDS.items():
        value = values.get(name)
        if name not in given or value is None or isinstance(value, bool):
            continue
        try:
            count = value if isinstance(value, int) else parse_count(str(value))
        except ZeroplanError:
            continue
        if count > bound:
            raise ZeroplanError(f"--{name.replace('_', '-')} {count:,} is past any real run (at most {bound:,})")
