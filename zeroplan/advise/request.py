"""An advise request as typed: the run's ScenarioArgs and advise's own options -> the policy they name -> Advice.

Shared by `zeroplan advise` and the Python API (`zeroplan.recommend`), with the defaults both show. Reads the
policy file when one is named; raises ZeroplanError for bad input; never prints or exits. The heavy modules
load when `advise_from` runs, so that the CLI can read the defaults at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.spec import Topology

if TYPE_CHECKING:
    from zeroplan.advise.advice import Advice
    from zeroplan.advise.layouts.result import LayoutAdvice
    from zeroplan.advise.policy import AdvisorPolicy
    from zeroplan.frameworks.apply import FromFile
    from zeroplan.scenario import ScenarioArgs

DEFAULT_MODEL = "gemma2-9b"  # the article's model (its section 3.1, docs/advisor.md)
DEFAULT_GLOBAL_BATCH = 512  # the article's batch threshold; ~1M tokens per step at sequence length 2048
DEFAULT_POLICY = "default"  # zeroplan's tree; "article" follows the source article's as written


@dataclass(frozen=True)
class AdviseArgs:
    """advise's own options, as typed (numbers still text)."""

    global_batch: str = str(DEFAULT_GLOBAL_BATCH)
    topology: Topology | None = None
    policy: str = DEFAULT_POLICY
    policy_file: str | None = None
    assignments: tuple[str, ...] = ()  # --set key=value, applied after the policy file
    thresholds: Mapping[str, Any] | None = None  # the Python API's overrides, as values; applied last
    search_parallelism: bool = False  # --search-parallelism (or the policy's search_parallelism)
    stack: str = "auto"  # --stack: which stack the parallelism search plans for (advise.layouts.space.Stack)


def load_policy(name: str, policy_file: str | None = None, assignments: tuple[str, ...] = (),
                thresholds: Mapping[str, Any] | None = None) -> AdvisorPolicy:  # fmt: skip
    """The named policy, then the file's overrides, then --set's, then `thresholds`: later wins."""
    from zeroplan.advise.policy import parse_assignments, policy_named, with_overrides
    from zeroplan.readers import parse_yaml, read_text

    policy = policy_named(name)
    if policy_file:
        path = Path(policy_file)
        policy = with_overrides(policy, parse_yaml(read_text(path), str(path)), str(path))
    if assignments:
        policy = with_overrides(policy, parse_assignments(assignments), "--set")
    if thresholds is not None:
        policy = with_overrides(policy, thresholds, "thresholds")
    return policy


def with_default_model(args: ScenarioArgs) -> ScenarioArgs:
    """`args`, planning DEFAULT_MODEL when neither a model nor a parameter count is given."""
    return args if args.model or args.params else replace(args, model=DEFAULT_MODEL)


def advise_from(args: ScenarioArgs, opts: AdviseArgs) -> Advice:
    """The advisor's answer for the run `args` describes, under the policy `opts` names."""
    from zeroplan.advise.advisor import advise
    from zeroplan.scenario import from_framework, needs_hardware, scenario
    from zeroplan.units import parse_count

    policy = load_policy(opts.policy, opts.policy_file, opts.assignments, opts.thresholds)
    args, found = from_framework(args)
    notes: tuple[str, ...] = ()
    if found is not None:
        args, opts, notes = _advising(args, opts, found, search=False)
    scn = needs_hardware(scenario(with_default_model(args)), "advise")
    advice = advise(scn, policy, opts.topology, global_batch=parse_count(opts.global_batch, "--global-batch"))
    update = {"model_assumed": not (args.model or args.params)}
    if notes:
        update["assumptions"] = notes + advice.assumptions
    return advice.model_copy(update=update)


def searching(opts: AdviseArgs) -> bool:
    """Whether the request asks for the parallelism search: --search-parallelism or the policy's setting."""
    if opts.search_parallelism:
        return True
    return load_policy(opts.policy, opts.policy_file, opts.assignments, opts.thresholds).search_parallelism


def search_from(args: ScenarioArgs, opts: AdviseArgs) -> LayoutAdvice:
    """The parallelism search's answer for the run `args` describes (advise.layouts.search)."""
    from zeroplan.advise.layouts.search import search_parallelism
    from zeroplan.advise.layouts.space import Stack
    from zeroplan.errors import UsageError
    from zeroplan.scenario import from_framework, needs_hardware, scenario
    from zeroplan.units import parse_count

    if opts.policy == "article":
        raise UsageError("--search-parallelism plans meshes with zeroplan's default policy; --policy article is the "
                         "article's data-parallel tree")
    policy = load_policy(opts.policy, opts.policy_file, opts.assignments, opts.thresholds)
    args, found = from_framework(args)
    notes: tuple[str, ...] = ()
    if found is not None:
        args, opts, notes = _advising(args, opts, found, search=True)
    planned = with_default_model(args)
    scn = needs_hardware(scenario(planned), "advise")
    advice = search_parallelism(scn, planned.model, policy, opts.topology,
                                global_batch=parse_count(opts.global_batch, "--global-batch"), stack=Stack(opts.stack))
    return advice.model_copy(update={"model_assumed": not (args.model or args.params),
                                     "assumptions": notes + advice.assumptions})


def _advising(args: ScenarioArgs, opts: AdviseArgs, found: FromFile,
              search: bool) -> tuple[ScenarioArgs, AdviseArgs, tuple[str, ...]]:  # fmt: skip
    """What advise takes from a --from file: the run, and the global batch its micro-batch and accumulation make.

    advise chooses the stage, offload and micro-batch itself, so the file's DeepSpeed config is not read. A file
    that lays the run on a tensor-parallel mesh is refused by the data-parallel advisor, in one line (never
    advised as pure data parallelism); the parallelism search chooses the mesh itself, and says so.
    """
    from zeroplan.units import parse_count

    notes = list(found.notes)
    if (mesh := _file_tp(args, found)) is not None:
        where, kind = mesh
        if not search:
            raise ZeroplanError(f"{where} is a {kind} mesh; advise plans data parallelism only: add "
                                "--search-parallelism to plan the mesh, or `zeroplan estimate --from` the file for "
                                "this layout")
        notes.append(f"{where}: not kept; the parallelism search chooses the mesh itself")
    if args.deepspeed_config or found.deepspeed is not None:
        args = replace(args, deepspeed_config=None)
        notes.append("advise recommends the stage, offload and micro-batch itself: the DeepSpeed config's are not used")
    if "global_batch" not in args.given and {"micro_batch", "grad_accum"} & found.updates.keys():
        micro, gas = parse_count(args.micro_batch, "--micro-batch"), parse_count(args.grad_accum, "--grad-accum")
        gpus = parse_count(args.gpus, "--gpus")
        opts = replace(opts, global_batch=str(micro * gas * gpus))
        notes.append(f"global batch {micro * gas * gpus} = micro-batch {micro} x accumulation {gas} x {gpus} GPUs, "
                     "from the file (--global-batch overrides it)")  # fmt: skip
    return args, opts, tuple(notes)


def _file_tp(args: ScenarioArgs, found: FromFile) -> tuple[str, str] | None:
    """Where a --from file sets a tensor-parallel, sequence-parallel or pipeline degree above 1, and which: its
    DeepSpeed config's tensor_parallel.autotp_size, sequence_parallel_size or pipeline.stages, or an Accelerate
    file's parallelism_config tp_size or sp_size (None: data parallelism)."""
    from zeroplan.deepspeed.parallel import autotp_size, pipeline_stages, sequence_parallel_size
    from zeroplan.scenario import deepspeed_source

    source = deepspeed_source(args, found)
    if source is not None and (tp := autotp_size(source.data)) > 1:
        return f"{source.origin}: tensor_parallel.autotp_size {tp}", "tensor-parallel"
    if source is not None and (pp := pipeline_stages(source.data)) > 1:
        return f"{source.origin}: pipeline.stages {pp}", "pipeline"
    if source is not None and (sp := sequence_parallel_size(source.data)) > 1:
        return f"{source.origin}: sequence_parallel_size {sp}", "sequence-parallel (DeepSpeed-Ulysses)"
    for key, kind in (("tp", "tensor-parallel"), ("cp", "sequence-parallel (DeepSpeed-Ulysses)")):
        taken = found.run.get(key)
        if taken is not None and int(taken.value) > 1:
            return f"{found.run.origin}: {taken.key} {int(taken.value)}", kind
    return None
