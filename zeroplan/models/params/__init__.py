"""Exact parameter counts per model family, equal to what transformers builds for the same config.

A decoder family describes its blocks as data (`FamilyConfig.decoder()`, zeroplan.models.block) and
params.decoder turns that into the nn.Modules its transformers *ForCausalLM builds, with their own direct
parameters, shapes and kinds; T5 (T5ForConditionalGeneration) lists its modules in params.t5. Totals, the largest
layer (DeepSpeed's definition), embeddings and MoE active parameters all follow from that one list.
Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from zeroplan.models import families as fam
from zeroplan.models.architecture import ParamCount
from zeroplan.models.hf.records import HFConfig, HFModel
from zeroplan.models.params.decoder import decoder_modules
from zeroplan.models.params.modules import EMBEDDING, Module


def _inventories() -> dict[type[fam.FamilyConfig], Callable[..., list[Module]]]:
    """Families without a block description, each listing its modules itself: loaded for those families only
    (fam.T5Config imports T5's family module, which a decoder never needs)."""
    from zeroplan.models.params.t5 import t5_modules

    return {fam.T5Config: t5_modules}


def module_inventory(model: fam.ModelSpec | fam.FamilyConfig) -> list[Module]:
    """The modules transformers builds for this config, each with its own direct parameter count."""
    config = model.config if isinstance(model, fam.ModelSpec | HFModel) else model
    if isinstance(config, HFConfig):  # counted by transformers: its modules as built
        return list(config.modules)
    if (decoder := config.decoder()) is not None:
        return decoder_modules(decoder)
    return _inventories()[type(config)](config)


def count_params(model: fam.ModelSpec | fam.FamilyConfig) -> ParamCount:
    """Exact parameter counts of a model, as transformers builds it.

    P = sum over modules of count x own parameters, a tied LM head once;
    L (largest layer) = max over modules of their own parameters, DeepSpeed's `model_to_params`
    (deepspeed/runtime/zero/stage3.py): the embedding or LM head for dense LLMs, all experts of
    a layer for Mixtral under transformers >= 5; E (embeddings) = token and learned position
    tables plus an untied head; A (active, MoE) = P minus the (E - k) experts a token skips in every MoE layer.
    The per-family formulas are in each family's `decoder()` docstring and docs/models.md.
    """
    config = model.config if isinstance(model, fam.ModelSpec | HFModel) else model
    if isinstance(config, HFConfig):
        return config.counts
    modules = module_inventory(model)
    config = model.config if isinstance(model, fam.ModelSpec) else model
    decoder = config.decoder()
    owned = [m for m in modules if not m.tied]
    total = sum(m.params * m.count for m in owned)
    return ParamCount(
        num_params=total,
        num_embedding_params=sum(m.params * m.count for m in owned if m.role == EMBEDDING),
        largest_layer_params=max(m.params for m in modules),
        num_active_params=total - sum((m.params - m.active) * m.count for m in owned if m.active is not None),
        notes=decoder.notes if decoder is not None else (),
    )


__all__ = ["Module", "count_params", "module_inventory"]
