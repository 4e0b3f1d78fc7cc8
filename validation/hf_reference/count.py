"""Reference parameter counts from transformers for the model configs in configs/.

For every configs/<model>.json (the architecture keys of the model's published config.json), this
builds the causal LM with transformers on the meta device (no weights, no memory for tensors, no
network) and records what transformers actually instantiates:

  num_params            unique parameters, counted once each by identity (tied weights once)
  largest_layer_params  max over modules of the sum of that module's OWN parameters
                        (parameters(recurse=False)); this is DeepSpeed's definition
  num_embedding_params  input embedding + output head when the head is not tied to it
  num_active_params     MoE only: what one token touches = all non-expert parameters
                        + top-k routed experts in every MoE layer (shared experts, routers and
                        dense layers are non-expert, so they are counted in full)
  persistent_buffers    buffers saved in the state dict that are not parameters (name, numel)
  layer_types           one decoder layer of each distinct kind: (module path, own param shapes)
  resolved_config       architecture keys as transformers resolved them, and which of them the
                        published file did not set (so the config-class default applied)

Multimodal configs (model_type gemma3, llama4) are parsed with their outer config class and the
text model is built from get_text_config(); vision towers and projectors are not counted.
Published model_types transformers does not know are built as the architecture they ship for
(kimi_k2 -> deepseek_v3, which is what its auto_map/architectures point at).

Routed experts are recognised as modules whose class name ends in "Experts" (transformers 5.x
fuses each MoE layer's experts into one module with a leading num_experts dimension).

Run from the repository root, in an environment with torch and transformers 5.x (zeroplan itself needs neither):

    python validation/hf_reference/count.py [model ...]

Writes validation/hf_reference/counts.json (keys sorted, no timestamps: reruns are identical).
With model names given, only those are counted and the result is printed instead of written.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, CONFIG_MAPPING  # noqa: E402

transformers.logging.set_verbosity_error()

HERE = Path(__file__).resolve().parent
CONFIG_DIR = HERE / "configs"
OUTPUT = HERE / "counts.json"

# Published model_type -> the transformers model_type it is built as.
BUILD_AS = {"kimi_k2": "deepseek_v3"}

# Config keys worth reporting (resolved value, and whether the published file set them).
ARCH_KEYS = [
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "tie_word_embeddings", "attention_bias", "mlp_bias",
    "partial_rotary_factor", "use_qk_norm", "layer_types", "sliding_window",
    # MoE
    "num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
    "moe_intermediate_size", "shared_expert_intermediate_size", "first_k_dense_replace",
    "decoder_sparse_step", "mlp_only_layers", "interleave_moe_layer_step", "intermediate_size_mlp",
    "moe_layers",
    # MLA
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    # linear attention (Qwen3-Next)
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "full_attention_interval",
    # multi-token prediction layers (declared in the config, not built by transformers)
    "num_nextn_predict_layers",
]

# Defaults of the config classes that decide counts when a published file leaves a key out.
DEFAULT_KEYS = ["vocab_size", "tie_word_embeddings", "head_dim", "attention_bias", "mlp_bias",
                "num_key_value_heads", "partial_rotary_factor", "use_qk_norm"]


def jsonable(value):
    """Config values as plain JSON (tuples to lists, unknown objects to str)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def load_config(raw: dict):
    """The transformers config for a published config dict, and the model_type it was built as.

    Returns (text_config, built_model_type, outer_model_type, published_text_keys).
    """
    outer_type = raw["model_type"]
    build_type = BUILD_AS.get(outer_type, outer_type)
    if build_type not in CONFIG_MAPPING:
        raise KeyError(f"transformers {transformers.__version__} has no model_type {build_type!r}")
    kwargs = {k: v for k, v in raw.items() if k != "model_type"}
    config = AutoConfig.for_model(build_type, **kwargs)
    if "text_config" in raw:
        text_config = config.get_text_config()
        published = set(raw["text_config"])
    else:
        text_config = config
        published = set(raw)
    return text_config, build_type, outer_type, published, config


# Vision-language model_types whose language model has no *ForCausalLM of its own (Qwen3-VL), or whose LM head
# the outer *ForConditionalGeneration ties by the outer config's flag (Qwen3.5): built whole, the language model
# and LM head kept (TextTower), the vision tower counted apart (vision_params).
TEXT_TOWER_TYPES = frozenset({"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})


class TextTower(torch.nn.Module):
    """A *ForConditionalGeneration's language model and LM head, named as a *ForCausalLM names them
    (model.layers..., lm_head), ties as the whole model made them."""

    def __init__(self, full: torch.nn.Module):
        super().__init__()
        self.model = full.model.language_model
        self.lm_head = full.lm_head
        self.config = full.config.get_text_config()
        self.vision_params = sum({id(p): p.numel() for p in full.parameters()}.values()) - sum(
            {id(p): p.numel() for p in self.parameters()}.values())

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head


def text_tower_on_meta(outer_config) -> TextTower:
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        return TextTower(AutoModelForImageTextToText.from_config(outer_config))


def build_on_meta(config, outer=None) -> torch.nn.Module:
    if outer is not None and outer.model_type in TEXT_TOWER_TYPES:
        return text_tower_on_meta(outer)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def own_params(module: torch.nn.Module) -> dict:
    return {name: list(p.shape) for name, p in module.named_parameters(recurse=False)}


def persistent_buffers(model: torch.nn.Module) -> dict:
    """Buffers that go into the state dict (not parameters), summed by name pattern."""
    found = {}
    for mod_name, module in model.named_modules():
        for buf_name, buf in module.named_buffers(recurse=False):
            if buf is None or buf_name in module._non_persistent_buffers_set:
                continue
            pattern = generic_path(f"{mod_name}.{buf_name}")
            entry = found.setdefault(pattern, {"count": 0, "numel_each": buf.numel(), "numel_total": 0})
            entry["count"] += 1
            entry["numel_total"] += buf.numel()
    return found


def generic_path(path: str) -> str:
    """model.layers.12.mlp.gate -> model.layers.N.mlp.gate"""
    return ".".join("N" if part.isdigit() else part for part in path.split("."))


def compress_indices(indices: list) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'"""
    runs, start, prev = [], None, None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            runs.append((start, prev))
            start = prev = i
    if start is not None:
        runs.append((start, prev))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def decoder_layers(model: torch.nn.Module):
    """The decoder block list (model.layers, transformer.h, ...): the first ModuleList with
    num_hidden_layers entries."""
    n_layers = model.config.num_hidden_layers
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers:
            return name, module
    raise RuntimeError("no decoder layer list found")


def layer_kinds(model: torch.nn.Module, config) -> list:
    """One entry per distinct decoder layer structure: which layers, and own-param shapes."""
    layers_name, layers = decoder_layers(model)
    config_layer_types = getattr(config, "layer_types", None)
    kinds = {}
    for index, layer in enumerate(layers):
        modules = []
        for sub_name, sub in layer.named_modules():
            params = own_params(sub)
            if params:
                modules.append([sub_name or "(layer)", type(sub).__name__, params])
        signature = json.dumps(modules)
        kind = kinds.setdefault(signature, {"layers": [], "modules": modules, "attention_types": set()})
        kind["layers"].append(index)
        if config_layer_types:
            kind["attention_types"].add(config_layer_types[index])
    result = []
    for kind in kinds.values():
        names = [m[0] for m in kind["modules"]]
        has_experts = any(m[1].endswith("Experts") for m in kind["modules"])
        linear_attention = any(n.startswith("linear_attn") for n in names)
        label = ("moe" if has_experts else "dense") + ("+linear_attention" if linear_attention else "")
        result.append({
            "label": label,
            "layers": compress_indices(kind["layers"]),
            "num_layers": len(kind["layers"]),
            "attention_types": sorted(kind["attention_types"]),
            "params_per_layer": sum(numel_of(shape) for m in kind["modules"] for shape in m[2].values()),
            "modules": [{"module": f"{generic_path(layers_name)}.N.{m[0]}", "class": m[1], "params": m[2]}
                        for m in kind["modules"]],
        })
    return result


def numel_of(shape: list) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def num_routed_experts(config):
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        value = getattr(config, key, None)
        if value:
            return value
    return None


def moe_counts(model: torch.nn.Module, config) -> dict | None:
    """Routed-expert totals and the parameters one token touches; None for dense models."""
    experts = [(name, m) for name, m in model.named_modules() if type(m).__name__.endswith("Experts")]
    if not experts:
        return None
    n_experts = num_routed_experts(config)
    top_k = getattr(config, "num_experts_per_tok", None) or getattr(config, "top_k_experts", None)  # Gemma 4
    total_expert = 0
    active_expert = 0
    for name, module in experts:
        params = list(module.parameters(recurse=True))
        leading = {p.shape[0] for p in params}
        if leading != {n_experts}:
            raise RuntimeError(f"{name}: expert params have leading dims {leading}, expected {n_experts}")
        layer_total = sum(p.numel() for p in params)
        total_expert += layer_total
        active_expert += layer_total // n_experts * top_k
    return {
        "num_moe_layers": len(experts),
        "num_routed_experts": n_experts,
        "top_k": top_k,
        "routed_expert_params": total_expert,
        "routed_expert_params_active": active_expert,
    }


def _readable(config, key: str) -> bool:
    """hasattr, except that a heterogeneous config's per-layer keys (Gemma 4's num_key_value_heads, head_dim) raise
    transformers' AmbiguousGlobalPerLayerAttributeError, a RuntimeError: those are not reported."""
    try:
        return hasattr(config, key)
    except RuntimeError:
        return False


def count(model_name: str) -> dict:
    raw = json.loads((CONFIG_DIR / f"{model_name}.json").read_text())
    config, build_type, outer_type, published, outer = load_config(raw)
    model = build_on_meta(config, outer)

    unique = {id(p): p for p in model.parameters()}  # model.parameters() already dedups; be explicit
    num_params = sum(p.numel() for p in unique.values())

    largest_name, largest = "", 0
    for name, module in model.named_modules():
        size = sum(p.numel() for p in module.parameters(recurse=False))
        if size > largest:
            largest_name, largest = name, size

    embed = model.get_input_embeddings()
    head = model.get_output_embeddings()
    embed_numel = sum(p.numel() for p in embed.parameters())
    # Gemma 4's per-layer input table (Gemma4TextModel.embed_tokens_per_layer) is a token embedding too
    embed_numel += sum(p.numel() for name, m in model.named_modules() if name.endswith("embed_tokens_per_layer")
                       for p in m.parameters())
    tied = head is not None and head.weight is embed.weight
    head_numel = 0 if (head is None or tied) else sum(p.numel() for p in head.parameters())

    result = {
        "published_model_type": outer_type,
        "built_as_model_type": build_type,
        "text_model_type": config.model_type,
        "text_config_class": type(config).__name__,
        "model_class": type(model).__name__,
        "num_params": num_params,
        "largest_layer_params": largest,
        "largest_layer_module": generic_path(largest_name),
        "num_embedding_params": embed_numel + head_numel,
        "input_embedding_params": embed_numel,
        "lm_head_params": head_numel,
        "lm_head_tied": tied,
        "num_params_non_embedding": num_params - embed_numel - head_numel,
        "persistent_buffers": persistent_buffers(model),
        **({"vision_params": model.vision_params} if isinstance(model, TextTower) else {}),
        "layer_types": layer_kinds(model, config),
        "resolved_config": {
            key: {"value": jsonable(getattr(config, key)), "from_published_config": key in published}
            for key in ARCH_KEYS if _readable(config, key)
        },
    }
    moe = moe_counts(model, config)
    if moe is not None:
        moe["num_active_params"] = num_params - moe["routed_expert_params"] + moe["routed_expert_params_active"]
        result["moe"] = moe
        result["num_active_params"] = moe["num_active_params"]
    else:
        result["num_active_params"] = num_params
    del model
    gc.collect()
    return result


def class_defaults(model_types: list) -> dict:
    out = {}
    for model_type in sorted(set(model_types)):
        config = AutoConfig.for_model(model_type)
        out[model_type] = {"config_class": type(config).__name__,
                           **{k: jsonable(getattr(config, k)) for k in DEFAULT_KEYS if hasattr(config, k)}}
    return out


def main(argv: list) -> None:
    names = argv or sorted(p.stem for p in CONFIG_DIR.glob("*.json"))
    models = {}
    for name in names:
        print(f"counting {name} ...", file=sys.stderr, flush=True)
        models[name] = count(name)
    model_types = [m["built_as_model_type"] for m in models.values()] + [m["text_model_type"] for m in models.values()]
    report = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "built_with": "AutoModelForCausalLM.from_config(text config) under torch.device('meta')",
        "config_class_defaults": class_defaults(model_types),
        "models": models,
    }
    text = json.dumps(report, indent=1, sort_keys=True) + "\n"
    if argv:
        print(text)
    else:
        OUTPUT.write_text(text)
        print(f"wrote {OUTPUT}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
