"""DeepSpeed's split of a PipelineModule's layers into pipeline stages, as pure functions of the layers' weights.

DeepSpeed's PipelineModule (deepspeedai/DeepSpeed@edaa7221:deepspeed/runtime/pipe/module.py, `_partition_layers`)
splits its layer list into `num_stages` contiguous parts by its `partition_method` (default 'parameters'):
- 'uniform': `ds_utils.partition_uniform(num_layers, num_stages)`, equal counts, the first ones one more;
- 'parameters': `ds_utils.partition_balanced` over each layer's trainable parameter count (`_count_layer_params`:
  each LayerSpec built and counted, a tied layer too);
- 'type:REGEX': `partition_balanced` over weights of 1 for the layers whose class name matches, 0 for the rest
  (Megatron-DeepSpeed's GPTModelPipe passes 'type:transformer').
`partition_balanced` (deepspeed/runtime/utils.py) is the dynamic program its docstring cites for the linear
partition problem, with DeepSpeed's own objective: the spread (largest part's weight less the smallest's) of the
parts. The functions below are written from that description, not copied; tests/test_ds_pipeline_split.py holds
them to hand-derived cases and validation/ds_pipeline.py runs DeepSpeed's own two functions (taken unchanged from
the source file given on its command line) against them (validation/ds_pipeline.json). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from math import inf

from zeroplan.errors import ZeroplanError
from zeroplan.models.block import Decoder
from zeroplan.models.mesh import Mesh
from zeroplan.models.params.decoder import final_norm_name, layer_modules, layer_sequence, outer_modules

UNIFORM, PARAMETERS, TYPE_PREFIX = "uniform", "parameters", "type:"
DEFAULT_METHOD = PARAMETERS  # PipelineModule(partition_method='parameters')


def partition_uniform(num_items: int, num_parts: int) -> tuple[int, ...]:
    """Part boundaries (num_parts + 1 of them, 0 first) of `num_items` in equal parts, the first n % p one larger;
    with no more items than parts, one item each and the rest empty (ds_utils.partition_uniform)."""
    if num_items <= num_parts:
        return tuple(min(p, num_items) for p in range(num_parts + 1))
    each, extra = divmod(num_items, num_parts)
    return tuple(p * each + min(p, extra) for p in range(num_parts + 1))


def partition_balanced(weights: list[int] | tuple[int, ...], num_parts: int) -> tuple[int, ...]:
    """Part boundaries of `weights` in `num_parts` contiguous non-empty parts, DeepSpeed's balanced split.

    For every prefix of i items cut into j parts the program keeps one state, (spread, heaviest, lightest part),
    built from the best state of a shorter prefix k into j - 1 parts plus the part k..i: spread = max(heaviest,
    w[k:i]) - min(lightest, w[k:i]); among the k it keeps the smallest spread, a tie going to the largest k (the
    last part as short as it can be). The boundaries are read back from the last item. No more items than parts:
    partition_uniform."""
    n, m = len(weights), num_parts
    if n <= m:
        return partition_uniform(n, m)
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    # best[j][i] = (spread, heaviest, lightest, k) of i items in j parts; None where no such split exists
    best: list[list[tuple[float, float, float, int] | None]] = [[None] * (n + 1) for _ in range(m + 1)]
    best[0][0] = (0, 0, inf, 0)  # no part yet: nothing is heavier, nothing lighter
    for i in range(1, n + 1):
        for j in range(1, min(i, m) + 1):
            chosen = None
            for k in range(i):
                before = best[j - 1][k]
                if before is None:
                    continue
                part = prefix[i] - prefix[k]
                heaviest, lightest = max(before[1], part), min(before[2], part)
                spread = heaviest - lightest
                if chosen is None or spread <= chosen[0]:
                    chosen = (spread, heaviest, lightest, k)
            best[j][i] = chosen
    bounds = [n]
    for j in range(m, 0, -1):
        bounds.append(best[j][bounds[-1]][3])
    return tuple(reversed(bounds))


def layer_weights(method: str, layer_params: list[int], is_layer: list[bool]) -> list[int] | None:
    """The weights `method` splits by (None: uniform, by count). 'type:...' weighs 1 the items `is_layer` marks."""
    if method == UNIFORM:
        return None
    if method == PARAMETERS:
        return list(layer_params)
    if method.startswith(TYPE_PREFIX):
        return [int(flag) for flag in is_layer]
    raise ZeroplanError(f"partition_method {method!r}: DeepSpeed's PipelineModule takes 'parameters', 'uniform' or "
                        "'type:REGEX' ('profile' raises NotImplementedError)")


def split_items(method: str, layer_params: list[int], is_layer: list[bool], stages: int) -> tuple[int, ...]:
    """Part boundaries of a PipelineModule's items under `method` (module docstring)."""
    weights = layer_weights(method, layer_params, is_layer)
    if weights is None:
        return partition_uniform(len(layer_params), stages)
    return partition_balanced(weights, stages)


def module_items(dec: Decoder) -> tuple[list[int], list[bool]]:
    """The PipelineModule zeroplan assumes for `dec`, as (parameters, is a decoder layer) per item, in order: the
    embedding (with any position table and extra tensors), each decoder layer, the final norm, the head (a tied
    head counted whole: DeepSpeed builds each TiedLayerSpec and counts its parameters). Megatron-DeepSpeed's
    GPTModelPipe lays its specs out in this order; its parameter-free functions are left out."""
    layers = layer_sequence(dec)
    own = {id(layer): sum(m.params * m.count for m in layer_modules(layer, dec)) for layer in layers}
    outer, norm_name = outer_modules(dec), final_norm_name(dec)
    head = sum(m.params for m in outer if m.name == dec.head)
    norm = sum(m.params for m in outer if m.name == norm_name)
    first = sum(m.params for m in outer if m.name not in (dec.head, norm_name))
    params = [first] + [own[id(layer)] for layer in layers] + [norm] * (norm_name is not None) + [head]
    flags = [False] + [True] * len(layers) + [False] * (norm_name is not None) + [False]
    return params, flags


def stage_layer_split(dec: Decoder, stages: int, method: str = DEFAULT_METHOD) -> tuple[int, ...]:
    """Decoder layers on each of `stages` pipeline stages under DeepSpeed's `method` (module_items' layout)."""
    params, flags = module_items(dec)
    bounds = split_items(method, params, flags, stages)
    return tuple(sum(flags[bounds[s]:bounds[s + 1]]) for s in range(stages))


def with_partition(mesh: Mesh, dec: Decoder) -> Mesh:
    """`mesh` with its DeepSpeed partition's layers per stage (unchanged for the other stacks, or once resolved)."""
    if mesh.pipe_partition is None or mesh.pp_layers is not None:
        return mesh
    return replace(mesh, pp_layers=stage_layer_split(dec, mesh.pp, mesh.pipe_partition))
