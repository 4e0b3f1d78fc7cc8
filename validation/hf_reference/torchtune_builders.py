"""The shapes each torchtune model builder states (torchtune/models/*/_model_builders.py), read from a torchtune
checkout with ast (nothing imported, nothing run), for tests/test_presets_hf.py to hold zeroplan's torchtune builder
table (zeroplan/frameworks/torchtune.py BUILDERS) to: a builder maps to a preset only where every shape it states
equals the preset's.

    python validation/hf_reference/torchtune_builders.py PATH/TO/torchtune [COMMIT]

Writes validation/hf_reference/presets/torchtune_builders.json. A keyword the builder passes from its own argument
(llama3_2_1b's tie_word_embeddings=tie_word_embeddings) takes that argument's default; one it leaves to the component
builder (llama2_7b's intermediate_dim) is not recorded.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "presets" / "torchtune_builders.json"
SHAPE_KEYS = ("vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "intermediate_dim", "head_dim",
              "tie_word_embeddings")


def defaults(func: ast.FunctionDef) -> dict:
    args = func.args.args[len(func.args.args) - len(func.args.defaults):]
    return {a.arg: d.value for a, d in zip(args, func.args.defaults) if isinstance(d, ast.Constant)}


def stated(func: ast.FunctionDef) -> dict | None:
    """The shape keywords of the builder's `return component(...)`, or None if it returns no such call."""
    returns = [node.value for node in ast.walk(func) if isinstance(node, ast.Return) and isinstance(node.value, ast.Call)]
    if len(returns) != 1:
        return None
    given, found = defaults(func), {}
    for keyword in returns[0].keywords:
        if keyword.arg in SHAPE_KEYS:
            value = keyword.value
            if isinstance(value, ast.Constant):
                found[keyword.arg] = value.value
            elif isinstance(value, ast.Name) and value.id in given:
                found[keyword.arg] = given[value.id]
    return found if {"vocab_size", "num_layers", "embed_dim"} <= set(found) else None


def main(root: str, commit: str = "") -> None:
    builders = {}
    for path in sorted(Path(root, "torchtune", "models").glob("*/_model_builders.py")):
        for func in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(func, ast.FunctionDef) and not func.name.startswith(("lora_", "qlora_")):
                if (shapes := stated(func)) is not None:
                    builders[func.name] = {"file": str(path.relative_to(root)), **shapes}
    out = {"source": f"pytorch/torchtune@{commit}" if commit else "pytorch/torchtune", "builders": builders}
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(builders)} builders)", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:])
