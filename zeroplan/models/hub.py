"""Hugging Face Hub ids (`meta-llama/Llama-3.1-8B`): the shape of one. Pure: no I/O, no network, ever.

A Hub id names a preset through the preset's `hf_id` (models/presets.py resolves it offline).
"""

from __future__ import annotations

import re

# owner/name as the Hub spells a repository id: letters, digits, '-', '_' and '.'; neither part starts with '.' or '-'.
HF_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
_HF_ID = re.compile(HF_ID_PATTERN)


def is_hub_id(ref: str) -> bool:
    """Whether `ref` has the shape of a Hub repository id (it may still name a local folder)."""
    return bool(_HF_ID.match(ref)) and not ref.endswith((".yaml", ".yml", ".json"))
