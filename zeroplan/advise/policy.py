"""The advisor's policy: which decision tree it follows and every threshold it compares against, each with its source.

Two named policies: ARTICLE (the source article's tree exactly as written, docs/advisor.md) and DEFAULT
(zeroplan's tree, which extends and corrects it). Any threshold can be overridden from a mapping (a YAML file)
or from `key=value` text (the CLI's --set). Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable, Mapping
from enum import Enum

from pydantic import Field, ValidationError

from zeroplan.errors import SpecError
from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import Topology
from zeroplan.memory.capacity import HEADROOM_FRACTION, HEADROOM_SOURCE


class Tree(str, Enum):
    """The decision procedure a policy follows (docs/advisor.md)."""

    article = "article"  # the article's flowchart, its steps and leaves as written
    default = "default"  # zeroplan's: ZeRO-1, checkpointing, offload, fewest GPUs, topology warnings, corrections


def _threshold(default, source: str, description: str, **constraints):
    """A policy field whose source travels with it (AdvisorPolicy.source reads it back)."""
    return Field(default, description=description, json_schema_extra={"source": source}, **constraints)


class AdvisorPolicy(Frozen):
    """A decision tree and its thresholds. Build variants with `with_overrides`, never by mutation."""

    name: str = "default"
    tree: Tree = Tree.default
    min_headroom_fraction: float = _threshold(
        HEADROOM_FRACTION, HEADROOM_SOURCE,
        "share of usable GPU memory left free on top of the calculator's own margins", ge=0.0, lt=1.0)
    zero3_topologies: tuple[Topology, ...] = _threshold(
        (Topology.nvlink,),
        "article 4.3 'NVLink/NVSwitch environment? yes -> use ZeRO-3'; a multi-node cluster is not one in the "
        "literal reading",
        "topologies the article tree accepts for ZeRO-3 (article tree)")
    zero3_min_global_batch: int = _threshold(
        512, "article 3 and 4.3 'batch size > 512: ZeRO-3 is acceptable' (one team's anecdote, strictly greater)",
        "global batch above which the article accepts ZeRO-3 (article tree)", ge=1)
    max_zero3_overhead_pct: float = _threshold(
        11.0, "article 3 'the ZeRO-3 loss stays within 11 %' (anecdote); the overhead itself is predicted by "
        "zeroplan.perf.throughput (docs/throughput.md)",
        "ZeRO-3 step-time overhead over ZeRO-0 above which the default tree warns, percent", ge=0.0)
    article_zero3_min_grad_accum: int = _threshold(
        4, "article 5.2 'gradient accumulation >= 4 with ZeRO-3' (wrong: ZeRO-3 re-gathers every micro-step, "
        "docs/throughput.md 5)",
        "the article's accumulation advice, quoted by the correction advisory", ge=1)
    long_sequence_tokens: int = _threshold(
        1024, "article 4.2 'long sequences (> 1024 tokens): ZeRO-3's advantage grows'",
        "sequence length above which the long-sequence advisory applies", ge=1)
    embedding_heavy_fraction: float = _threshold(
        0.2, "zeroplan judgment: the article (4.2) names embedding-heavy models but gives no number",
        "embedding share of all parameters from which the embedding advisory applies", ge=0.0, le=1.0)
    consider_zero1: bool = _threshold(
        True, "ZeRO paper (arXiv:1910.02054) 5.1: P_os has data parallelism's 2 Psi communication; the article's "
        "tree skips it", "offer ZeRO-1 (default tree)")
    consider_checkpointing: bool = _threshold(
        True, "Chen et al. 2016, Korthikanti et al. 2022: recomputation trades compute (8N instead of 6N FLOPs "
        "per token with full checkpointing) for activation memory", "turn on activation checkpointing when "
        "nothing fits without it (default tree)")
    consider_offload: bool = _threshold(
        True, "ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840): host-link bound, the last resort",
        "offload optimizer states (and ZeRO-3 parameters) when nothing fits on the GPUs (default tree)")
    consider_nvme: bool = _threshold(
        True, "ZeRO-Infinity (Rajbhandari et al. 2021, arXiv:2104.07857)",
        "offload to NVMe when CPU offload does not fit (default tree)")
    host_memory_gib_per_node: float | None = _threshold(
        None, "site-specific: host RAM per node; null = not checked",
        "CPU memory per node that offloaded states may use, GiB", gt=0)
    max_gpus: int = _threshold(
        1024, "zeroplan.memory.capacity.MAX_GPUS: where the fewest-GPUs search stops",
        "largest GPU count the fewest-GPUs search tries (default tree)", ge=1)
    search_parallelism: bool = _threshold(
        False, "zeroplan judgment: off keeps `zeroplan advise` to data parallelism unless asked (docs/advisor.md)",
        "search tp x pp x cp x dp layouts as --search-parallelism does")
    tp_within_node: bool = _threshold(
        True, "Narayanan et al. 2021 (arXiv:2104.04473) 3.3: tensor parallelism's per-layer all-reduces stay "
        "within a node's NVLink", "keep the tensor-parallel degree within one node (parallelism search)")
    overrides: tuple[tuple[str, str], ...] = Field(
        (), description="(field, where the value came from) for every overridden threshold")

    def source(self, field: str) -> str:
        """Where a threshold's value comes from: its override, else the source the field declares."""
        for name, origin in self.overrides:
            if name == field:
                return f"set by {origin}"
        return type(self).model_fields[field].json_schema_extra["source"]


ARTICLE = AdvisorPolicy(name="article", tree=Tree.article)
DEFAULT = AdvisorPolicy(name="default", tree=Tree.default)
POLICIES = {p.name: p for p in (ARTICLE, DEFAULT)}
THRESHOLDS = tuple(name for name in AdvisorPolicy.model_fields if name not in ("name", "tree", "overrides"))


def policy_named(name: str) -> AdvisorPolicy:
    """ARTICLE or DEFAULT by name; SpecError with the names otherwise."""
    if name not in POLICIES:
        raise SpecError(f"unknown policy {name!r}; policies: {', '.join(POLICIES)}")
    return POLICIES[name]


def _check_keys(keys: Iterable[str], origin: str) -> None:
    for key in keys:
        if key not in THRESHOLDS:
            close = difflib.get_close_matches(str(key), THRESHOLDS, n=1, cutoff=0.6)  # a YAML key may be a date, 1
            hint = f"did you mean {close[0]}?" if close else f"keys: {', '.join(THRESHOLDS)}"
            raise SpecError(f"{origin}: unknown policy key {key!r}; {hint}")


def with_overrides(policy: AdvisorPolicy, values: Mapping[str, object], origin: str) -> AdvisorPolicy:
    """`policy` with some thresholds replaced; each replaced field's source becomes `origin`.

    Raises SpecError naming the key for an unknown key or a value of the wrong type or range.
    """
    if not isinstance(values, Mapping):
        kind = "empty" if values is None else type(values).__name__
        raise SpecError(f"{origin}: expected a mapping of policy keys to values, got {kind}")
    _check_keys(values, origin)
    kept = tuple((k, o) for k, o in policy.overrides if k not in values)
    data = {**policy.model_dump(), **values, "overrides": kept + tuple((k, origin) for k in values)}
    try:
        return AdvisorPolicy.model_validate(data)
    except ValidationError as exc:
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
                 for e in exc.errors()]
        raise SpecError(f"{origin}: " + "; ".join(parts)) from None


def _is_tuple(field: str) -> bool:
    return typing.get_origin(AdvisorPolicy.model_fields[field].annotation) is tuple


def parse_assignments(items: Iterable[str]) -> dict[str, object]:
    """{'key': value} from 'key=value' texts; comma lists for tuple fields, 'null' for none. Values stay text
    for pydantic to validate, so '11' becomes 11.0 and 'false' False."""
    values: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key:
            raise SpecError(f"--set {item!r}: expected key=value")
        _check_keys([key], "--set")
        if text.lower() in ("null", "none"):
            values[key] = None
        elif _is_tuple(key):
            values[key] = tuple(part.strip() for part in text.split(",") if part.strip())
        else:
            values[key] = text
    return values
