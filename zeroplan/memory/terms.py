"""The pieces a memory estimate is made of: a Term (one named block of bytes), the Phase of the step it is
alive in, and the even split of a tensor over data-parallel ranks.
"""

from dataclasses import dataclass
from enum import Enum


class Phase(str, Enum):
    """When a term is alive. The peak is the larger of the backward and the optimizer-step totals."""

    always = "always"  # model states and persistent buffers
    backward = "backward"  # alive with the activations (forward/backward of a micro-step)
    step = "step"  # alive only in the optimizer step, after activations are freed


# Results are frozen slotted dataclasses, not pydantic models: a sweep builds hundreds of thousands.
@dataclass(frozen=True, slots=True)
class Term:
    """One named line of memory with where its size comes from."""

    name: str
    bytes: int
    phase: Phase = Phase.always
    source: str = ""
    knob: str = ""  # the DeepSpeedKnobs field that sizes part of it, "" when only the model's tensors do
    knob_bytes: int = 0  # the part of `bytes` that knob sets: what shrinking it to its floor would free


@dataclass(frozen=True, slots=True)
class Setting:
    """One engine setting the estimate assumes, in the engine's own words (`sharding_strategy: FULL_SHARD`)."""

    name: str
    value: str
    source: str = ""


def shard_numel(numel: int, dp: int) -> int:
    """Elements one rank holds of a tensor partitioned over dp ranks: ceil(numel / dp).

    DeepSpeed pads flat partitions to equal size, so shards x dp >= numel, short of it by less than dp.
    """
    return -(-numel // dp)
