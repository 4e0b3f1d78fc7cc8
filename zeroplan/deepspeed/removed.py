"""The config blocks DeepSpeed v0.19.8 removed: it refuses a config that has one, before anything else is read.

DeepSpeed v0.19.8 `deepspeed/runtime/config.py` `_reject_removed_config_keys` (`_REMOVED_TOP_LEVEL_CONFIG_KEYS`)
raises DeepSpeedConfigError when one of these keys is present, whatever its value, right after loading the
file. v0.19.5 still parsed most of them (docs/deepspeed.md). Every message points to
https://github.com/deepspeedai/DeepSpeed/issues/8489. The texts quoted here are DeepSpeed's where zeroplan
has the release's wording ("..." where only part of it is quoted); for the others it says only that the
block was removed.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from zeroplan.frozen import Frozen

REMOVAL_ISSUE = "https://github.com/deepspeedai/DeepSpeed/issues/8489"

# Top-level key -> what DeepSpeed says (or its replacement), in the order DeepSpeed checks them.
REMOVED_TOP_LEVEL_KEYS: dict[str, str] = {
    "nebula": "removed",
    "compression_training": "removed",
    "amp": "NVIDIA Apex AMP integration has been removed. Use DeepSpeed 'fp16', 'bf16', or 'torch_autocast' instead.",
    "quantize_training": "removed",
    "sparse_gradients": "removed",
    "eigenvalue": "removed",
    "sparse_attention": "DeepSpeed Sparse Attention has been removed; the 'sparse_attention' configuration block "
                        "is no longer supported.",
    "elasticity": "Elastic training has been removed; ... Set train_batch_size / train_micro_batch_size_per_gpu / "
                  "gradient_accumulation_steps directly.",
    "graph_harvesting": "removed",
    "curriculum_learning": "Legacy top-level 'curriculum_learning' has been removed. Use "
                           "'data_efficiency.data_sampling.curriculum_learning' instead.",
    "progressive_layer_drop": "removed",
}  # fmt: skip
# zero_optimization keys (MiCS, ZeRO++ LoCo) refused the same way.
REMOVED_ZERO_KEYS: dict[str, str] = dict.fromkeys(
    ("mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param"), "removed"
)


class RemovedKey(Frozen):
    """A key DeepSpeed v0.19.8 refuses because the feature behind it is gone."""

    key: str = Field(description="dotted path, e.g. sparse_attention or zero_optimization.mics_shard_size")
    reason: str = Field(description="DeepSpeed's message, or 'removed' where the release states none")

    @property
    def message(self) -> str:
        said = f"DeepSpeed says: {self.reason}" if self.reason != "removed" else "the feature is gone"
        return (f"{self.key}: removed in DeepSpeed 0.19.8, which refuses the config with DeepSpeedConfigError; "
                f"{said} ({REMOVAL_ISSUE})")  # fmt: skip


def find_removed_keys(data: Mapping) -> tuple[RemovedKey, ...]:
    """Every removed key present, top level first, in DeepSpeed's order."""
    found = [RemovedKey(key=key, reason=why) for key, why in REMOVED_TOP_LEVEL_KEYS.items() if key in data]
    zero = data.get("zero_optimization")
    if isinstance(zero, Mapping):
        found += [RemovedKey(key=f"zero_optimization.{key}", reason=why) for key, why in REMOVED_ZERO_KEYS.items()
                  if key in zero]  # fmt: skip
    return tuple(found)
