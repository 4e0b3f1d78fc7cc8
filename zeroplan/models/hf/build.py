"""Build a config with transformers on the meta device and count it exactly (the zeroplan[hf] extra).

Imports torch and transformers; loaded only by zeroplan.models.hf's functions. Counting rules, the same as
validation/count_params.py checks the described families with:
  P  parameters, each once by identity (a tied LM head is the embedding's tensor: once);
  L  largest layer: max over modules of their own direct parameters, DeepSpeed's `model_to_params`
     (deepspeed/runtime/zero/stage3.py);
  E  embeddings: nn.Embedding tables and the output embeddings (tied once);
  A  MoE active: P minus (E - k) / E of every experts module (a module whose every own tensor has the
     expert count as its first dim, one of them 3-D: transformers 5's fused `*Experts`); unknown when none is found;
  persistent buffers that are not parameters (state_dict entries that are buffers), reported, not counted in P.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace

import torch
import transformers
from huggingface_hub.errors import StrictDataclassError  # transformers 5's config classes are strict dataclasses
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.modeling_layers import GradientCheckpointingLayer

from zeroplan.errors import SpecError
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.models.hf.records import HFConfig
from zeroplan.models.params.modules import BODY, EMBEDDING, EXPERTS, Module
from zeroplan.validate import validated

# Config keys transformers' MoE configs use for the routed experts and the experts per token.
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
# Gemma 4 names its top-k top_k_experts
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_experts_per_token", "top_k_experts")
_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")  # a ModuleList index inside a module path


def hf_config(data: dict, origin: str = "config"):
    """The transformers config for an HF config.json mapping, from the config class alone (no Hub, no remote code)."""
    data = dict(data)
    model_type = data.pop("model_type")
    for key in ("auto_map", "_name_or_path", "quantization_config"):  # remote code, Hub ids, quantizers: not built
        data.pop(key, None)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return AutoConfig.for_model(model_type, **data)
    except (ValueError, TypeError, KeyError, AttributeError, RuntimeError, StrictDataclassError) as exc:
        if model_type not in transformers.CONFIG_MAPPING:
            raise SpecError(f"{origin}: model_type {model_type!r} is described neither by zeroplan nor by "
                            f"transformers {transformers.__version__}") from None
        raise SpecError(f"{origin}: transformers refuses this config: {_first_line(exc)}") from None
    finally:
        transformers.logging.set_verbosity(verbosity)


def build_on_meta(config, dtype: torch.dtype = torch.bfloat16, **kwargs) -> nn.Module:
    """AutoModelForCausalLM for `config`, every tensor on the meta device (no memory, no weights)."""
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the config's own warnings (token ids) are not the user's business here
    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    except ValueError as exc:
        raise SpecError(f"model_type {config.model_type!r}: transformers builds no causal LM from it "
                        f"({_first_line(exc)})") from None
    except (TypeError, KeyError, AttributeError, IndexError, RuntimeError, NotImplementedError, AssertionError,
            ImportError, StrictDataclassError) as exc:  # ImportError: a sub-model needing a package (timm, pillow)
        raise SpecError(f"model_type {config.model_type!r}: transformers could not build it from this config "
                        f"({type(exc).__name__}: {_first_line(exc)})") from None
    finally:
        transformers.logging.set_verbosity(verbosity)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _own(module: nn.Module) -> list[nn.Parameter]:
    return list(module.parameters(recurse=False))


def num_experts(text_config) -> tuple[int, int]:
    """(routed experts, experts per token) as the config names them; (0, 0) for a dense model."""
    experts = next((v for k in EXPERT_KEYS if isinstance(v := layer_value(text_config, k, []), int) and v > 1), 0)
    top_k = next((v for k in TOP_K_KEYS if isinstance(v := layer_value(text_config, k, []), int) and v > 0), 0)
    return (experts, top_k) if experts and top_k else (0, 0)


def _is_experts(module: nn.Module, experts: int) -> bool:
    own = _own(module)
    # every own tensor indexed by expert first, and a 3-D weight among them: not the router's (E, h) and bias
    return bool(experts) and bool(own) and all(p.shape[:1] == (experts,) for p in own) and any(p.dim() == 3 for p in own)


def module_records(model: nn.Module, experts: int) -> list[Module]:
    """Every module with parameters of its own, as zeroplan.models.params' Module records: the layer index in
    the path becomes `*` and modules of one path and shape are one record, counted."""
    embeddings = {id(m) for m in model.modules() if isinstance(m, nn.Embedding)} | {id(model.get_output_embeddings())}
    seen: set[int] = set()
    groups: Counter = Counter()
    for name, module in model.named_modules():
        own = _own(module)
        if not own:
            continue
        tied = all(id(p) in seen for p in own)
        seen |= {id(p) for p in own}
        role = EMBEDDING if id(module) in embeddings else EXPERTS if _is_experts(module, experts) else BODY
        shapes = tuple(tuple(p.shape) for p in own)
        groups[(_INDEX.sub("*", name), sum(p.numel() for p in own), role, tied, shapes)] += 1
    return [Module(name, params, count, role, tied, shapes) for (name, params, role, tied, shapes), count in groups.items()]


def persistent_buffer_numel(model: nn.Module) -> int:
    """Elements of the buffers state_dict saves (persistent), each storage once; parameters are not buffers."""
    persistent = set(model.state_dict(keep_vars=True))
    return sum({id(b): b.numel() for name, b in model.named_buffers() if name in persistent}.values())


def count(model: nn.Module, experts: int, top_k: int) -> tuple[ParamCount, bool]:
    """The exact counts of a built model, and whether the MoE active count could be determined."""
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in _own(m)) for m in model.modules())
    tables = [m for name, m in model.named_modules()
              if isinstance(m, nn.Embedding) and not name.endswith("relative_attention_bias")]  # fmt: skip
    tables.append(model.get_output_embeddings())
    emb = sum({id(p): p.numel() for m in tables if m is not None for p in m.parameters()}.values())
    expert_modules = [m for m in model.modules() if _is_experts(m, experts)]
    skipped = sum(sum(p.numel() for p in _own(m)) // experts * (experts - top_k) for m in expert_modules)
    known = not experts or bool(expert_modules)
    counts = ParamCount(num_params=total, num_embedding_params=emb, largest_layer_params=largest,
                        num_active_params=total - skipped)
    return counts, known


def layer_value(text, key: str, notes: list[str]):
    """A config attribute, or where it differs by layer (a heterogeneous config, Gemma 4's head_dim and
    num_key_value_heads: transformers raises AmbiguousGlobalPerLayerAttributeError, a RuntimeError, on the global
    read; or a list with one entry per layer, Gemma 3n's intermediate_size) the value most layers have, the note
    saying so where they differ; None where the config has no such attribute."""
    ambiguous = False
    try:
        value = getattr(text, key, None)
    except RuntimeError:
        ambiguous = True
        values = [getattr(layer, key, None) for layer in getattr(text, "per_layer_config", None) or ()]
    else:
        if not isinstance(value, list) or len(value) != getattr(text, "num_hidden_layers", None):
            return value
        values = value  # a per-layer list in the key itself (Gemma 3n's intermediate_size)
    counted = Counter(v for v in values if v is not None and not isinstance(v, (list, dict)))
    if not counted:
        return None
    value = counted.most_common(1)[0][0]
    if ambiguous or len(counted) > 1:
        notes.append(f"{key} differs by layer ({', '.join(f'{v} in {n}' for v, n in sorted(counted.items()))} "
                     f"layers): the flat facts take {value}, the count each layer's own")
    return value


def architecture(model: nn.Module, text, model_type: str, config_json: str, notes: list[str]) -> Architecture:
    """The flat facts the calculators read, from the built text model and its config."""
    heads = layer_value(text, "num_attention_heads", notes)
    if heads is None:  # a state-space model: describe() says it in one line
        raise AttributeError("num_attention_heads", name="num_attention_heads")
    experts, top_k = num_experts(text)
    layers = decoder_layers(model)
    first = layers[0] if layers else model
    norms = [m for m in first.modules() if "norm" in type(m).__name__.lower() and _own(m)
             and not any(_own(c) for c in m.children())]  # fmt: skip
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    inner = layer_value(text, "moe_intermediate_size", notes) if experts else None
    inner = (inner or layer_value(text, "intermediate_size", notes) or getattr(text, "n_inner", None)
             or 4 * text.hidden_size)
    return validated(Architecture, dict(
        family=model_type,
        hidden_size=text.hidden_size,
        num_layers=text.num_hidden_layers,
        num_attention_heads=heads,
        num_key_value_heads=layer_value(text, "num_key_value_heads", notes) or heads,
        head_dim=layer_value(text, "head_dim", notes) or text.hidden_size // heads,
        intermediate_size=inner,
        vocab_size=text.vocab_size,
        gated_mlp=any(n in names for n in ("gate_proj", "gate_up_proj", "w1")) or experts > 0,
        norm="layernorm" if any(isinstance(m, nn.LayerNorm) for m in model.modules()) else "rmsnorm",
        norms_per_layer=max(1, len(norms)),
        num_experts=experts,
        num_experts_per_tok=top_k,
        tie_word_embeddings=_tied(model),
        attention_dropout=float(layer_value(text, "attention_dropout", notes) or 0.0),
        sliding_window=window if isinstance(window := layer_value(text, "sliding_window", notes), int) else None,
        attn_logit_softcapping=_real(text, "attn_logit_softcapping"),
        final_logit_softcapping=_real(text, "final_logit_softcapping"),
        hf_config_json=config_json,
    ), model_type)


def _real(config, key: str) -> float | None:
    value = layer_value(config, key, [])
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value else None


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The language model's repeated blocks: transformers 5 derives every decoder layer from
    GradientCheckpointingLayer; `get_decoder()` is the language model of a multimodal one (not its vision tower)."""
    decoder = model.get_decoder() if callable(getattr(model, "get_decoder", None)) else None
    return [m for m in (decoder or model).modules() if isinstance(m, GradientCheckpointingLayer)]


def _tied(model: nn.Module) -> bool:
    head, table = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and table is not None and head.weight is table.weight


def describe(data: dict, origin: str):
    """The HFConfig (counts, module records, Architecture, notes) of an HF config.json mapping."""
    config = hf_config(data, origin)
    model = build_on_meta(config)
    text = config.get_text_config()
    experts, top_k = num_experts(text)
    counts, active_known = count(model, experts, top_k)
    model_type = data["model_type"]
    facts: list[str] = []
    try:
        arch = architecture(model, text, model_type, json.dumps(data, sort_keys=True), facts)
    except AttributeError as exc:  # a config without attention heads (a state-space model), hidden size, ...
        missing = getattr(exc, "name", None) or str(exc)
        raise SpecError(f"{origin}: model_type {model_type!r}: transformers' {type(text).__name__} has no "
                        f"{missing}, which zeroplan's calculators need (a model without attention is not "
                        "modelled)") from None
    notes = [f"{model_type}: not described by zeroplan; counted by transformers {transformers.__version__} "
             f"({type(model).__name__} built on the meta device from the config, offline)"]
    notes += facts
    if experts and not active_known:
        notes.append(f"MoE active parameters not determined (no module holds the {experts} experts as one tensor "
                     "per weight): taken as all parameters")
    if buffers := persistent_buffer_numel(model):
        notes.append(f"{buffers:,} elements of persistent buffers that are not parameters: not trained, not counted")
    if text is not config:
        notes.append(f"multimodal: {type(model).__name__} as transformers builds it, parts other than the language "
                     "model counted too")
    return HFConfig(model_type=model_type, counts=replace(counts, notes=tuple(notes)),
                    modules=tuple(module_records(model, experts)), arch=arch, notes=tuple(notes))
