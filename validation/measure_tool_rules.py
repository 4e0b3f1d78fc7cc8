"""Run LLaMA-Factory's and axolotl's own freeze and all-linear rules on zeroplan's named parameters; write what they train.

The functions are taken, unchanged, from the tools' source files given on the command line (at the commits
docs/inputs.md cites: hiyouga/LLaMA-Factory@ff6d4d1, axolotl-ai-cloud/axolotl@067b021):
  LLaMA-Factory src/llamafactory/model/adapter.py `_setup_freeze_tuning`, model/model_utils/misc.py
    `find_all_linear_modules`; axolotl src/axolotl/utils/freeze.py `freeze_layers_except` (+ LayerNamePattern and
    its range helpers), src/axolotl/loaders/adapter.py `find_all_linear_names`.
They run on a stand-in model whose named_parameters() / named_modules() are zeroplan's (zeroplan.models.named,
checked against transformers by validation/measure_finetune.py): parameters that record requires_grad, modules
whose class names are transformers' kinds (Linear, Embedding, RMSNorm, TopKRouter, Experts). No torch needed.
Writes validation/tool_rules.json (each case's trainable names as a count and a sha256 of the sorted names, and
each model's `all` linear names); tests/test_from_upstream.py holds zeroplan's reading of the rules to it.
Run:
    python validation/measure_tool_rules.py LF/src/llamafactory/model/adapter.py LF/src/llamafactory/model/model_utils/misc.py \\
        AX/src/axolotl/utils/freeze.py AX/src/axolotl/loaders/adapter.py
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
import types
from pathlib import Path
from typing import Callable, List, Tuple, Union

from zeroplan.models.named import named_parameters
from zeroplan.models.presets import load_model

OUT = Path(__file__).resolve().parent / "tool_rules.json"
PRESETS = ["llama-3.1-8b", "qwen3-30b-a3b", "gemma2-2b", "mixtral-8x7b", "phi-3-mini"]
FREEZE_RULES = [(2, "all", None), (-3, "mlp", "embed_tokens,norm"), (4, "self_attn,mlp", "norm"), (40, "all", None)]
PATTERNS = [["^model.embed_tokens.weight$[:32000]", "^lm_head.weight$"], ["model.layers.1[0-5].mlp"],
            ["model.layers.[0-9]+.self_attn.q_proj", "model.norm"], ["^model.layers.3.+$"]]  # fmt: skip


class Param:
    def __init__(self, shape):
        self.shape, self.requires_grad = shape, True

    def requires_grad_(self, flag):
        self.requires_grad = flag

    def register_hook(self, hook):
        pass

    def __len__(self):
        return self.shape[0]


KINDS = {name: type(name, (), {}) for name in ("Linear", "Embedding", "RMSNorm", "TopKRouter", "Experts")}


def _kind(p) -> type:
    if p.linear:
        return KINDS["Linear"]
    if p.module.endswith("embed_tokens"):
        return KINDS["Embedding"]
    if p.module.endswith(".gate"):
        return KINDS["TopKRouter"]
    return KINDS["Experts" if ".experts" in p.module else "RMSNorm"]


class Model:
    def __init__(self, preset: str):
        spec = load_model(preset)
        self.named = named_parameters(spec)
        self.params = [(p.name, Param(p.shape)) for p in self.named]
        self.config = types.SimpleNamespace(model_type=spec.config.model_type,
                                            num_hidden_layers=spec.architecture().num_layers)

    def named_parameters(self):
        return iter(self.params)

    def parameters(self):
        return (p for _, p in self.params)

    def named_modules(self):
        return [(m, _kind(p)()) for m, p in {p.module: p for p in self.named}.items()]

    def trainable(self) -> list[str]:
        return sorted(name for name, p in self.params if p.requires_grad)


def functions(path: str, names: set[str], scope: dict) -> dict:
    """The named top-level functions and classes of a source file, compiled unchanged into `scope`."""
    source = Path(path).read_text(encoding="utf-8")
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            exec(compile(ast.Module([node], []), path, "exec"), scope)
    return scope


def digest(names: list[str]) -> dict:
    return {"count": len(names), "sha256": hashlib.sha256("\n".join(names).encode()).hexdigest()}


def main(lf_adapter: str, lf_misc: str, ax_freeze: str, ax_adapter: str) -> None:
    log = types.SimpleNamespace(info_rank0=print, debug=lambda *a: None, info=lambda *a: None, warning=print)
    base = {"re": re, "List": List, "Tuple": Tuple, "Union": Union, "Callable": Callable, "logger": log, "LOG": log}
    lf = functions(lf_adapter, {"_setup_freeze_tuning"}, {**base, "COMPOSITE_MODELS": {},
                                                          "get_forbidden_modules": lambda c, a: set()})
    functions(lf_misc, {"find_all_linear_modules"}, lf)
    linear = KINDS["Linear"]
    ax = functions(ax_freeze, {"freeze_layers_except", "_invert_ranges", "_merge_ranges",
                               "_create_freeze_parameters_hook", "LayerNamePattern"},
                   {**base, "is_main_process": lambda: False})
    ax.update({"bnb": types.SimpleNamespace(nn=types.SimpleNamespace(
        Linear4bit=linear, Linear8bitLt=linear)), "torch": types.SimpleNamespace(nn=types.SimpleNamespace(Linear=linear)),
        # loaders/utils.py get_linear_embedding_layers, for these families
        "get_linear_embedding_layers": lambda model_type: ["embed_tokens", "lm_head"]})  # fmt: skip
    functions(ax_adapter, {"find_all_linear_names"}, ax)
    out = {"sources": {"llamafactory": "hiyouga/LLaMA-Factory@ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30",
                       "axolotl": "axolotl-ai-cloud/axolotl@067b021c8b87a9e5e380b9173c704cf7340e30f5"},
           "freeze": [], "unfrozen": [], "all_linear": {}}  # fmt: skip
    for preset in PRESETS:
        for layers, modules, extra in FREEZE_RULES:
            model = Model(preset)
            args = types.SimpleNamespace(use_llama_pro=False, freeze_trainable_layers=layers,
                                         freeze_multi_modal_projector=True,
                                         freeze_trainable_modules=[m.strip() for m in modules.split(",")],
                                         freeze_extra_modules=extra.split(",") if extra else None)  # fmt: skip
            lf["_setup_freeze_tuning"](model, args, True, False)
            out["freeze"].append({"preset": preset, "layers": layers, "modules": modules, "extra": extra,
                                  **digest(model.trainable())})
        for patterns in PATTERNS:
            model = Model(preset)
            ax["freeze_layers_except"](model, patterns)
            out["unfrozen"].append({"preset": preset, "patterns": patterns, **digest(model.trainable())})
        model = Model(preset)
        out["all_linear"][preset] = {"llamafactory": sorted(lf["find_all_linear_modules"](model, True)),
                                     "axolotl": sorted(ax["find_all_linear_names"](model))}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
