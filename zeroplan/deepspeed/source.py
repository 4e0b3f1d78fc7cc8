"""A ds_config.json file as DeepSpeed reads it (comments allowed), each key's line kept, before it is read
against a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from zeroplan.deepspeed.reader import DeepSpeedConfig, parse_ds_config
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
    """A ds_config.json as DeepSpeed reads it: comments allowed, each key's line kept."""
    text = read_text(path)
    source = scan_json_text(text)
    return DeepSpeedSource(parse_json(source.text, str(path)), str(path), source)
