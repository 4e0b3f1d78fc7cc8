"""A ds_config.json file as DeepSpeed reads it (comments allowed), each key's line kept, before it is read
against a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from zeroplan.deepspeed.keys import TOP_LEVEL_KEYS, is_comment_key
from zeroplan.deepspeed.reader import DeepSpeedConfig, parse_ds_config
from zeroplan.deepspeed.removed import REMOVED_TOP_LEVEL_KEYS
from zeroplan.errors import SpecError
from zeroplan.jsonsource import JsonSource, scan_json_text
from zeroplan.memory.setup import TrainingSetup
from zeroplan.readers import parse_json, read_text


@dataclass(frozen=True)
class DeepSpeedSource:
    """A DeepSpeed config before it is read against a run: the mapping and where its keys are."""

    data: object
    origin: str
    source: JsonSource | None = None
    key_lines: Mapping[str, int] = field(default_factory=dict)  # an inline block's keys, lines in the plan

    def parse(self, *, hidden_size: int | None, dp_world: int, setup: TrainingSetup | None = None,
              assumed: frozenset[str] = frozenset()) -> DeepSpeedConfig:  # fmt: skip
        """The config, its `"auto"` values resolved from the hidden size, the setup and the data-parallel size
        (`assumed`: the setup fields that are zeroplan's defaults)."""
        config = parse_ds_config(self.data, origin=self.origin, source=self.source, hidden_size=hidden_size,
                                 setup=setup, dp_world=dp_world, assumed=assumed)  # fmt: skip
        return config.model_copy(update={"key_lines": dict(self.key_lines)}) if self.key_lines else config


def read_deepspeed_config(path: Path) -> DeepSpeedSource:
    """A ds_config.json as DeepSpeed reads it: comments allowed, each key's line kept. A file with keys but none
    DeepSpeed reads is another kind of file given by mistake (a model's config.json): refused, not read as
    DeepSpeed's defaults with a warning per key."""
    text = read_text(path)
    source = scan_json_text(text)
    data = parse_json(source.text, str(path))
    if isinstance(data, Mapping) and data and not any(_deepspeed_key(key) for key in data):
        raise SpecError(f"{path}: no key DeepSpeed reads (train_batch_size, zero_optimization, bf16, ...): "
                        f"{_looks_like(data)}")
    return DeepSpeedSource(data, str(path), source)


# Keys that say which other file a mistaken --deepspeed-config is, and the option that reads it.
OTHER_KINDS = (("model_type", "a Hugging Face model config; give it as --model"),
               ("allocated_bytes.all.peak", "a torch.cuda.memory_stats() record; give it to zeroplan calibrate"),
               ("log_history", "a trainer_state.json; give it to zeroplan calibrate"),
               ("peft_type", "a peft adapter config; give it as --adapter-config"),
               ("target_modules", "a peft adapter config; give it as --adapter-config"))  # fmt: skip


def _looks_like(data: Mapping) -> str:
    return next((f"it looks like {what}" for key, what in OTHER_KINDS if key in data), "not a DeepSpeed config")


def _deepspeed_key(key: object) -> bool:
    return isinstance(key, str) and (key in TOP_LEVEL_KEYS or key in REMOVED_TOP_LEVEL_KEYS or is_comment_key(key))
