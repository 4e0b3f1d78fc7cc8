"""validation/hf_reference/counts.json (written by validation/hf_reference/count.py: transformers 5.24 building each
configs/<model>.json on the meta device) read as the tests compare against it."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from zeroplan.models.params import count_params, module_inventory

REFERENCE = Path(__file__).resolve().parent.parent / "validation" / "hf_reference"


@cache
def counts() -> dict:
    return json.loads((REFERENCE / "counts.json").read_text(encoding="utf-8"))


def reference(model: str) -> dict:
    return counts()["models"][model]


def hf_config(model: str) -> dict:
    return json.loads((REFERENCE / "configs" / f"{model}.json").read_text(encoding="utf-8"))


def measured_totals(model: str) -> tuple[int, int, int, int]:
    """(params, largest layer, embeddings, active) as transformers built them."""
    ref = reference(model)
    return ref["num_params"], ref["largest_layer_params"], ref["num_embedding_params"], ref["num_active_params"]


def counted_totals(config) -> tuple[int, int, int, int]:
    c = count_params(config)
    return c.num_params, c.largest_layer_params, c.num_embedding_params, c.num_active_params


def measured_layers(model: str) -> list[dict[str, list]]:
    """Per distinct layer kind: module path (N for the index) -> sorted shapes of its own parameters."""
    return [{m["module"]: sorted(m["params"].values()) for m in kind["modules"]}
            for kind in reference(model)["layer_types"]]


def layer_shapes(modules) -> dict[str, list]:
    """The per-layer modules of an inventory as measured_layers spells them (one layer kind)."""
    return {m.name.replace("*", "N"): sorted(list(s) for s in m.shapes) for m in modules}


def counted_layers(config_or_decoder) -> list[str]:
    """The distinct layer structures of a block description (layers differing only in attention type are one),
    each as sorted (module, shapes) text, as `measured_signatures` gives transformers' ones."""
    from zeroplan.models.params.decoder import layer_modules

    dec = config_or_decoder.decoder() if hasattr(config_or_decoder, "decoder") else config_or_decoder
    kinds = {str(sorted(layer_shapes(layer_modules(layer, dec)).items())) for layer, _ in dec.layers}
    return sorted(kinds)


def measured_signatures(model: str) -> list[str]:
    return sorted(str(sorted(kind.items())) for kind in measured_layers(model))


def counted_names(config) -> set[str]:
    return {m.name for m in module_inventory(config)}
