"""Plan files and DeepSpeed config files -> the Scenario and DeepSpeedConfig that `zeroplan check` checks.

Reads with presets' helpers (size limit, UTF-8, safe YAML without duplicate keys, JSON with DeepSpeed's
comments); plan.py and dsconfig.py stay pure. A path inside a plan (model, hardware, deepspeed) is
relative to the plan's folder. Every problem is a ZeroplanError whose message starts with the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from zeroplan import presets
from zeroplan.checks import check_rule_ids
from zeroplan.commands import layout_of, resolve_model
from zeroplan.engines import check_stage
from zeroplan.dsconfig import DeepSpeedConfig, parse_ds_config
from zeroplan.errors import SpecError, ZeroplanError
from zeroplan.estimate import Scenario, overheads_for, small_param_numel
from zeroplan.findings import RunContext
from zeroplan.jsonsource import JsonSource, scan_json_text
from zeroplan.plan import Plan, merge_setup
from zeroplan.spec import DeepSpeedKnobs, Topology, TrainingSetup


@dataclass(frozen=True)
class DeepSpeedSource:
    """A DeepSpeed config before it is read against a run: the mapping and where its keys are."""

    data: object
    origin: str
    source: JsonSource | None = None
    key_lines: Mapping[str, int] = field(default_factory=dict)  # an inline block's keys, lines in the plan

    def parse(self, *, hidden_size: int | None, dp_world: int, setup: TrainingSetup | None = None) -> DeepSpeedConfig:
        """The config, its `"auto"` values resolved from the hidden size, the setup and the data-parallel size."""
        config = parse_ds_config(self.data, origin=self.origin, source=self.source, hidden_size=hidden_size,
                                 setup=setup, dp_world=dp_world)  # fmt: skip
        return config.model_copy(update={"key_lines": dict(self.key_lines)}) if self.key_lines else config


def read_deepspeed_config(path: Path) -> DeepSpeedSource:
    """A ds_config.json as DeepSpeed reads it: comments allowed, each key's line kept."""
    text = presets.read_text(path)
    source = scan_json_text(text)
    return DeepSpeedSource(presets.parse_json(source.text, str(path)), str(path), source)


@dataclass(frozen=True)
class PlannedRun:
    """One plan, resolved: what the calculators and the rules take."""

    origin: str  # the plan file; for a bare --deepspeed-config check, the config file
    plan: Plan
    scenario: Scenario
    config: DeepSpeedConfig
    topology: Topology

    @property
    def context(self) -> RunContext:
        scn = self.scenario
        return RunContext(parallelism=scn.parallelism, hardware=scn.hardware, min_headroom_pct=self.plan.min_headroom_pct)


def load_plan(path: Path) -> PlannedRun:
    """Read, validate and resolve one plan file."""
    origin = str(path)
    text = presets.read_text(path)
    plan = plan_from_data(presets.parse_yaml(text, origin), origin)
    return resolve_plan(plan, origin, path.parent, presets.yaml_key_lines(text))


def plan_from_data(data: object, origin: str) -> Plan:
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(f"{origin}: expected a mapping of plan keys, got {kind}")
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        raise SpecError(presets.validation_message(origin, exc)) from None


def _near(ref: str, base: Path) -> str:
    """A file reference relative to the plan's folder; preset names and absolute paths unchanged."""
    if not presets.looks_like_path(ref) or os.path.isabs(ref):
        return ref
    return os.path.normpath(base / ref)


def _deepspeed_source(plan: Plan, origin: str, base: Path, plan_lines: Mapping[str, int]) -> DeepSpeedSource:
    if isinstance(plan.deepspeed, str):
        return read_deepspeed_config(Path(_near(plan.deepspeed, base)))
    inline = {key.removeprefix("deepspeed."): line for key, line in plan_lines.items() if key.startswith("deepspeed.")}
    return DeepSpeedSource(plan.deepspeed, origin, key_lines=inline)


def resolve_plan(plan: Plan, origin: str, base: Path, plan_lines: Mapping[str, int] | None = None) -> PlannedRun:
    """Presets, the model and the DeepSpeed config of a validated plan, into a Scenario.

    Raises SpecError 'origin: ...' (a problem in a file the plan names keeps that file's name too).
    """
    try:
        return _resolve(plan, origin, base, plan_lines or {})
    except ZeroplanError as exc:
        if str(exc).startswith(f"{origin}: "):
            raise
        raise SpecError(f"{origin}: {exc}") from None


def _resolve(plan: Plan, origin: str, base: Path, plan_lines: Mapping[str, int]) -> PlannedRun:
    """The config is read twice: first without the plan's setup, to see what it states (a value the plan
    states differently is an error, as in Hugging Face); then with the merged setup, so its `"auto"`
    values resolve to what the run will use.
    """
    try:
        check_rule_ids(plan.ignore)
    except ZeroplanError as exc:
        raise SpecError(f"ignore: {exc}") from None
    hardware = presets.load_hardware(_near(plan.hardware, base))
    model = _near(plan.model, base) if plan.model else None
    largest = str(plan.largest_layer) if plan.largest_layer else None
    summary, arch = resolve_model(model, str(plan.params) if plan.params else None, largest, DeepSpeedKnobs())
    hidden, dp = (arch.hidden_size if arch else None), plan.parallelism.dp
    ds = _deepspeed_source(plan, origin, base, plan_lines)
    setup, problems = merge_setup(plan, ds.parse(hidden_size=hidden, dp_world=dp))
    if problems:
        raise SpecError("; ".join(problems))
    config = ds.parse(hidden_size=hidden, dp_world=dp, setup=setup)
    extra = plan.overheads
    scenario = Scenario(
        model=summary.model_copy(update={"small_param_numel": small_param_numel(arch, config.knobs)}),
        arch=arch, setup=setup, parallelism=plan.parallelism, knobs=config.knobs, hardware=hardware,
        overheads=overheads_for(hardware, extra.fragmentation, extra.cuda_context_gib, extra.nccl_gib),
        engine=plan.engine, engine_options=plan.engine_options, layout=layout_of(model, plan.engine),
    )  # fmt: skip
    check_stage(plan.engine, config.stage)
    return PlannedRun(origin, plan, scenario, config, plan.topology_for(hardware.intra_node_fabric))
