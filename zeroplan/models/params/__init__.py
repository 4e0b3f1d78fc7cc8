"""Exact parameter counts per model family, equal to what transformers builds for the same config.

Each family lists the nn.Modules its transformers class builds (AutoModelForCausalLM for decoders,
T5ForConditionalGeneration for T5) with their own direct parameters (`*_modules`, one file per
group of families, as in zeroplan.families); totals, the largest layer (DeepSpeed's definition),
embeddings and MoE active parameters all follow from that one list.
Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from zeroplan.models import families as fam
from zeroplan.models.architecture import ParamCount
from zeroplan.models.params.layernorm import (
    bloom_modules,
    falcon_modules,
    gpt2_modules,
    gpt_neox_modules,
    opt_modules,
)
from zeroplan.models.params.modules import EMBEDDING, EXPERTS, Module
from zeroplan.models.params.rmsnorm import (
    gemma2_modules,
    llama_modules,
    mistral_modules,
    mixtral_modules,
    phi3_modules,
    qwen2_modules,
)
from zeroplan.models.params.t5 import t5_modules

_INVENTORIES: dict[type[fam.FamilyConfig], Callable[..., list[Module]]] = {
    fam.GPT2Config: gpt2_modules,
    fam.GPTNeoXConfig: gpt_neox_modules,
    fam.OPTConfig: opt_modules,
    fam.BloomConfig: bloom_modules,
    fam.FalconConfig: falcon_modules,
    fam.LlamaConfig: llama_modules,
    fam.MistralConfig: mistral_modules,
    fam.MixtralConfig: mixtral_modules,
    fam.Qwen2Config: qwen2_modules,
    fam.Gemma2Config: gemma2_modules,
    fam.Phi3Config: phi3_modules,
    fam.T5Config: t5_modules,
}


def module_inventory(model: fam.ModelSpec | fam.FamilyConfig) -> list[Module]:
    """The modules transformers builds for this config, each with its own direct parameter count."""
    config = model.config if isinstance(model, fam.ModelSpec) else model
    return _INVENTORIES[type(config)](config)


def _inactive_expert_params(model: fam.ModelSpec | fam.FamilyConfig, modules: list[Module]) -> int:
    """Expert weights one token skips: (E - k) of the E experts in every experts module."""
    arch = model.architecture()
    skipped = arch.num_experts - arch.num_experts_per_tok
    return sum(m.params // arch.num_experts * skipped * m.count for m in modules if m.role == EXPERTS)


def count_params(model: fam.ModelSpec | fam.FamilyConfig) -> ParamCount:
    """Exact parameter counts of a model, as transformers builds it.

    P = sum over modules of count x own parameters, a tied LM head once;
    L (largest layer) = max over modules of their own parameters, DeepSpeed's `model_to_params`
    (deepspeed/runtime/zero/stage3.py): the embedding or LM head for dense LLMs, all experts of
    a layer for Mixtral under transformers >= 5; E (embeddings) = token and learned position
    tables plus an untied head; A (active, MoE) = P minus the (E - k) experts a token skips.
    The per-family formulas are in each `*_modules` docstring and docs/models.md.
    """
    modules = module_inventory(model)
    owned = [m for m in modules if not m.tied]
    total = sum(m.params * m.count for m in owned)
    return ParamCount(
        num_params=total,
        num_embedding_params=sum(m.params * m.count for m in owned if m.role == EMBEDDING),
        largest_layer_params=max(m.params for m in modules),
        num_active_params=total - _inactive_expert_params(model, modules),
    )


__all__ = ["Module", "count_params", "module_inventory"]
