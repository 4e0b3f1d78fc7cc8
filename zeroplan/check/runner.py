"""`zeroplan check`: expand the plan arguments, load each plan, compute the evidence, run the rules.

A plan that cannot be read or resolved becomes an `invalid-input` finding for that file, and the other
plans are still checked. The command line's own mistakes raise UsageError (exit 2); a bare
--deepspeed-config check raises its input errors (exit 1), since there is no plan to report them on.
Never prints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from zeroplan.check.findings import Finding
from zeroplan.check.globs import GLOB_CHARS, expand_plans
from zeroplan.check.planfiles import PlannedRun, load_plan, plan_from_data, resolve_plan
from zeroplan.check.rules import check_rule_ids, count_by_severity, failed, run_checks
from zeroplan.check.rules.fabric import FabricEvidence
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.hardware.spec import Topology
from zeroplan.memory.estimate import evaluate, stage_refusal
from zeroplan.memory.summary import param_count
from zeroplan.memory.setup import Attention, DeepSpeedKnobs, ZeroStage
from zeroplan.memory.stage import StageEstimate
from zeroplan.scenario import ScenarioArgs
from zeroplan.validate import validation_message

INVALID_INPUT = "invalid-input"  # a plan (or its DeepSpeed config) that cannot be read: always an error, never ignored
# CLI option -> plan training key, for a bare --deepspeed-config check.
TRAINING_OPTIONS = {
    "precision": "precision", "optimizer": "optimizer", "seq_len": "seq_len",
    "micro_batch": "train_micro_batch_size_per_gpu", "grad_accum": "gradient_accumulation_steps",
    "checkpointing": "checkpointing", "attention": "attn_implementation", "loss": "loss",
    "post_training": "post_training", "teacher": "teacher",
}  # fmt: skip
# Options that describe the run for a bare --deepspeed-config check; a plan states its own.
SCENARIO_OPTIONS = ("model", "params", "largest_layer", "gpus", "nodes", "hardware", *TRAINING_OPTIONS)
_ATTN_IMPLEMENTATION = {Attention.eager: "eager", Attention.flash: "sdpa"}


@dataclass(frozen=True)
class PlanResult:
    """One plan's findings, with what was resolved and estimated when it could be read."""

    file: str
    findings: tuple[Finding, ...]
    run: PlannedRun | None = None
    memory: StageEstimate | None = None


@dataclass(frozen=True)
class CheckReport:
    """Every plan's result, and whether warnings fail the check."""

    results: tuple[PlanResult, ...]
    strict: bool = False

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for result in self.results for f in result.findings)

    def plan_failed(self, result: PlanResult) -> bool:
        return failed(result.findings, strict=self.strict)

    @property
    def counts(self) -> dict[str, int]:
        return count_by_severity(self.findings)

    @property
    def exit_code(self) -> int:
        """0 clean, 1 any error (or, strict, any warning)."""
        return 1 if failed(self.findings, strict=self.strict) else 0


def check_usage(plans: list[str], args: ScenarioArgs, *, machine_output: bool, output: Path | None) -> None:
    """The command line's own mistakes, before anything is read: UsageError (exit 2)."""
    if plans and (args.deepspeed_config or args.from_file):
        raise UsageError(f"give plan files or {'--from' if args.from_file else '--deepspeed-config'}, not both")
    if not plans and not args.deepspeed_config and not args.from_file:
        raise UsageError("give plan files (or globs), --deepspeed-config PATH with --model or --params, or --from FILE")
    if args.from_kind and not args.from_file:
        raise UsageError("--from-kind names the kind of a --from file: give --from FILE")
    if plans and (extra := [o for o in SCENARIO_OPTIONS if o in args.given]):
        names = ", ".join("--" + o.replace("_", "-") for o in extra)
        raise UsageError(f"{names} describe the run for --deepspeed-config or --from; a plan states its own")
    if output is not None and not machine_output:
        raise UsageError("--output writes the json, github or junit report: choose one with --format")


def check_ignore_ids(ignore: Iterable[str]) -> None:
    """--ignore ids must be rules: an unknown one is a usage error, with close matches."""
    try:
        check_rule_ids(ignore)
    except ZeroplanError as exc:
        raise UsageError(f"--ignore: {exc}") from None


def check_plans(patterns: Iterable[str], *, ignore: Iterable[str] = (), strict: bool = False) -> CheckReport:
    """Check every plan the patterns name; unreadable ones are findings."""
    ignore = tuple(ignore)
    check_ignore_ids(ignore)
    return CheckReport(tuple(check_file(path, ignore) for path in expand_plans(patterns)), strict)


def check_file(path: str, ignore: Iterable[str] = ()) -> PlanResult:
    if any(c in path for c in GLOB_CHARS) and not Path(path).exists():
        return _invalid(path, f"no file matches {path!r}")
    try:
        run = load_plan(Path(path))
    except ZeroplanError as exc:
        return _invalid(path, str(exc).removeprefix(f"{path}: "))
    except ValidationError as exc:  # a value no loader check caught; still this plan's problem only
        return _invalid(path, validation_message(path, exc).removeprefix(f"{path}: "))
    return check_run(run, ignore)


def _invalid(path: str, message: str) -> PlanResult:
    return PlanResult(path, (Finding(rule=INVALID_INPUT, severity="error", message=message, file=path),))


def check_run(run: PlannedRun, ignore: Iterable[str] = ()) -> PlanResult:
    """The rules over one resolved plan, with the memory estimate of its stage and its fabric as evidence."""
    refused = stage_refusal(run.scenario, run.config.stage)  # a finding says why (pipeline-zero-stage)
    memory = None if run.mesh_problems or refused else evaluate(run.scenario, run.config.stage)
    evidence = {"memory": memory, "throughput": fabric_evidence(run), "mesh": run.mesh_problems}
    findings = run_checks(run.config, run.context, evidence=evidence, ignore={*ignore, *run.plan.ignore})
    return PlanResult(run.origin, findings, run, memory)


def fabric_evidence(run: PlannedRun) -> FabricEvidence:
    """The plan's topology, and ZeRO-3's predicted overhead over ZeRO-0 where it matters and can be modelled."""
    # the throughput model is data-parallel only: on a mesh, the fabric rules see the topology alone
    if run.topology is Topology.nvlink or run.config.stage is not ZeroStage.zero3 or run.mesh is not None:
        return FabricEvidence(run.topology)
    return FabricEvidence(run.topology, zero3_overhead_pct(run))


def zero3_overhead_pct(run: PlannedRun) -> float | None:
    """ZeRO-3's step time over ZeRO-0's, percent, from the throughput model; None without hardware."""
    scn = run.scenario
    if scn.hardware is None:
        return None
    from zeroplan.perf.throughput import estimate_throughput

    throughput = estimate_throughput(param_count(scn.model), scn.arch, scn.hardware, scn.setup, scn.parallelism, ZeroStage.zero3,
                                     scn.knobs, run.topology)  # fmt: skip
    return throughput.overhead_vs_zero0_pct


def check_deepspeed_config(path: str, args: ScenarioArgs, *, ignore: Iterable[str] = (), strict: bool = False) -> CheckReport:
    """One DeepSpeed config against the run the command line describes, as if it were a plan's.

    Options given on the command line are the plan's training setup; the others come from the config.
    """
    ignore = tuple(ignore)
    check_ignore_ids(ignore)
    training = {key: getattr(args, opt) for opt, key in TRAINING_OPTIONS.items() if opt in args.given}
    if "attn_implementation" in training:
        training["attn_implementation"] = _ATTN_IMPLEMENTATION[training["attn_implementation"]]
    data = {"model": args.model, "params": args.params, "largest_layer": args.largest_layer, "hardware": args.hardware,
            "gpus": args.gpus, "nodes": args.nodes, "training": training, "deepspeed": path}  # fmt: skip
    plan = plan_from_data({k: v for k, v in data.items() if v is not None}, "command line")
    run = resolve_plan(plan, path, Path("."))
    return CheckReport((check_run(run, ignore),), strict)


def check_from_file(args: ScenarioArgs, *, ignore: Iterable[str] = (), strict: bool = False) -> CheckReport:
    """A --from file's run, checked as if it were a plan: its DeepSpeed config (or, for FSDP and DDP, the stage its
    strategy maps to), with the options given on the command line over the file's."""
    from zeroplan.scenario import deepspeed_source, from_framework, model_of

    ignore = tuple(ignore)
    check_ignore_ids(ignore)
    applied, found = from_framework(args)
    model_of(applied, found, DeepSpeedKnobs())  # the file's model, or the error that names its key
    deepspeed_source(applied, found)  # its AutoTP mesh, or what is refused, is read by resolve_plan below
    # The file's values, its tool's defaults too: the Trainer passes those to DeepSpeed as well, and refuses a config
    # that states another (transformers' HfTrainerDeepSpeedConfig), so a plan that states them finds the same clash.
    stated = applied.given | found.updates.keys()
    training = {key: getattr(applied, opt) for opt, key in TRAINING_OPTIONS.items() if opt in stated}
    if "attn_implementation" in training:
        training["attn_implementation"] = _ATTN_IMPLEMENTATION[training["attn_implementation"]]
    deepspeed = applied.deepspeed_config or found.deepspeed or _stage_only(found.stage or 0, applied)
    from zeroplan.scenario.finetune import finetune_fields

    data = {"model": applied.model, "params": applied.params, "largest_layer": applied.largest_layer,
            "hardware": applied.hardware, "gpus": applied.gpus, "nodes": applied.nodes, "training": training,
            "deepspeed": deepspeed, "engine": applied.engine,
            "finetune": finetune_fields(applied, applied.model)}  # the file's fine-tuning mode, its rules resolved  # fmt: skip
    if (tp := found.run.get("tp")) is not None:  # Accelerate's parallelism_config tp_size: Hugging Face's tp_plan
        data["mesh"] = {"tp": tp.value, "vocab_parallel": False}
    if (cp := found.run.get("cp")) is not None:  # Accelerate's parallelism_config sp_size: ALST/Ulysses
        data["mesh"] = {"cp": cp.value, "cp_comm": "a2a"}
    origin = found.run.origin
    plan = plan_from_data({k: v for k, v in data.items() if v is not None}, origin)
    return CheckReport((check_run(resolve_plan(plan, origin, Path(".")), ignore),), strict)


def _stage_only(stage: int, args: ScenarioArgs) -> dict:
    """The DeepSpeed block a plan for an FSDP or DDP run holds: the ZeRO stage its strategy maps to, and the run's
    batch and precision (as a DeepSpeed config would state them, so that the checks read them as the run's)."""
    from zeroplan.memory.setup import Precision
    from zeroplan.units import parse_count

    micro, gas = parse_count(args.micro_batch, "--micro-batch"), parse_count(args.grad_accum, "--grad-accum")
    pure = args.precision is Precision.bf16_true
    return {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": gas,
            "zero_optimization": {"stage": stage}, "fp16": {"enabled": args.precision is Precision.fp16_mixed},
            "bf16": {"enabled": pure or args.precision is Precision.bf16_mixed,
                     "bf16_master_weights_and_grads": pure, "bf16_optimizer_states": pure}}  # fmt: skip
