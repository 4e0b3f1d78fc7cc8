"""What zeroplan.models.hf hands the calculators: a config counted by transformers, and a measurement's bytes.

Torch-free (the extra's torch modules build these; the core reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from zeroplan.errors import SpecError
from zeroplan.models.architecture import Architecture, ParamCount

if TYPE_CHECKING:  # models.params imports this package: no import back at run time
    from zeroplan.models.params.modules import Module


@dataclass(frozen=True, slots=True)
class HFConfig:
    """A config counted by transformers: the counts, the module records and the Architecture built from it."""

    model_type: str
    counts: ParamCount
    modules: tuple[Module, ...]
    arch: Architecture
    notes: tuple[str, ...]  # what was counted and how, in words (the estimate's assumptions)

    def architecture(self) -> Architecture:
        return self.arch

    def decoder(self) -> None:
        """No block description (zeroplan.models.block): the modules are transformers' as built."""
        return None


@dataclass(frozen=True, slots=True)
class HFModel:
    """A model file whose model_type only transformers describes (the counterpart of families.ModelSpec)."""

    name: str
    source: str
    config: HFConfig

    def architecture(self) -> Architecture:
        return self.config.arch


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredActivations:
    """Bytes one meta-device forward and loss saved, by region, for a copy of the model with few layers.

    `layer_bytes[i]` is what only layer i of the copy saved; `layer_of[j]` is the copy layer that stands for real
    layer j (its length is the real depth). Storages saved by more than one region (rotary tables) are in `shared_bytes`.
    """

    layer_bytes: tuple[int, ...]
    layer_of: tuple[int, ...]
    layer_input_bytes: int  # a layer's hidden-state input (what full checkpointing keeps per layer)
    layer_input_saved: tuple[bool, ...]  # the layer saved its own input (then the recompute need not make it)
    core_bytes: tuple[int, ...]  # per copy layer: saved inside the attention core, its inputs excluded
    core_input_bytes: tuple[int, ...]  # per copy layer: the core's q, k, v that nothing saved (a selective recompute keeps them)
    core_mask_bytes: int  # the masks the cores read, which a selective recompute keeps to re-read
    held_bytes: int  # layer arguments a checkpointed layer keeps for its recompute (masks, position ids)
    shared_bytes: int
    embedding_bytes: int
    head_bytes: int  # after the last layer, inside the model's forward: final norm, LM head input, soft-capping
    logits_bytes: int
    loss_saved_bytes: int
    loss_copy_bytes: int  # the fp32 copy of 16-bit logits the loss makes (alive while it runs)
    notes: tuple[str, ...]


class NotMeasurable(SpecError):
    """The meta-device forward of a model cannot run (a value-dependent op: `.item()`, an index built from values,
    a copy cut in depth that the model's forward reshapes by its full depth). The count stands; the activations
    are estimated from the nearest described block instead (zeroplan.memory.measured)."""
