"""The Python API: what `import zeroplan` offers a notebook or another tool (docs/api.md).

Keyword-only functions over plain Python values -- counts as ints, floats or text ("9e9"), enums as their
values or members, paths as str or Path -- that return the typed objects the CLI renders: Estimate, Advice,
CheckReport, ParamCount, ModelSpec, HardwareSpec; `to_dict` turns the first three into the CLI's JSON data.
The defaults are the CLI's, read from the same places (the dataclasses in memory/setup.py, DEFAULT_HARDWARE,
advise/request.py). Bad input raises ZeroplanError (or pydantic's ValidationError) with the one-line message
the CLI prints, which names the CLI's option. Never prints, writes or exits.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

from zeroplan import scenario as scenarios
from zeroplan.advise.request import (
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_POLICY,
    AdviseArgs,
    advise_from,
)
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.hardware import presets as hardware_presets
from zeroplan.hardware.presets import DEFAULT_HARDWARE
from zeroplan.hardware.spec import HardwareSpec, Topology
from zeroplan.memory.estimate import Estimate
from zeroplan.memory.setup import (
    Attention,
    Checkpointing,
    Engine,
    Loss,
    OffloadDevice,
    Optimizer,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
    checkpointing_label,
    parse_checkpointing,
)
from zeroplan.models import presets as model_presets
from zeroplan.models.architecture import ParamCount
from zeroplan.models.mesh import Schedule
from zeroplan.registry import preset_names
from zeroplan.scenario import answers
from zeroplan.scenario.parallel import MESH_OPTIONS, MeshArgs
from zeroplan.units import Unit

if TYPE_CHECKING:  # loaded by the functions that return them: an estimate never imports the advisor or the checks
    from zeroplan.advise.advice import Advice
    from zeroplan.advise.layouts.result import LayoutAdvice
    from zeroplan.check.runner import CheckReport
    from zeroplan.models.families import FamilyConfig, ModelSpec

Count = Union[int, float, str]  # 8, 9e9, "9e9", "7_000_000_000": a positive whole number
E = TypeVar("E", bound=Enum)
_SETUP, _PARALLELISM = TrainingSetup(), Parallelism()
_RUN_DEFAULTS = scenarios.ScenarioArgs()
_COUNTS = ("params", "largest_layer", "gpus", "nodes", "seq_len", "micro_batch", "grad_accum", *scenarios.KNOB_OPTIONS)
_ENUMS = {"precision": Precision, "optimizer": Optimizer, "attention": Attention, "loss": Loss,
          "offload_optimizer": OffloadDevice, "offload_param": OffloadDevice, "engine": Engine}  # fmt: skip
_AMOUNTS = ("cuda_context_gib", "nccl_gib", "fragmentation")
_PATHS = ("model", "deepspeed_config")
_NAME_LISTS = ("freeze", "lora_targets", "modules_to_save")


def estimate(
    *,
    model: str | Path | None = None,
    params: Count | None = None,
    largest_layer: Count | None = None,
    gpus: Count = _PARALLELISM.gpus,
    nodes: Count | None = None,
    hardware: str | Path | None = DEFAULT_HARDWARE,
    stage: int | None = None,
    precision: Precision | str = _SETUP.precision,
    optimizer: Optimizer | str = _SETUP.optimizer,
    fp32_grad_accum: bool = _SETUP.fp32_grad_accum,
    seq_len: Count = _SETUP.seq_len,
    micro_batch: Count = _SETUP.micro_batch,
    grad_accum: Count = _SETUP.grad_accum,
    checkpointing: Checkpointing | str = _SETUP.checkpointing,
    attention: Attention | str = _SETUP.attention,
    loss: Loss | str = _SETUP.loss,
    offload_optimizer: OffloadDevice | str = OffloadDevice.none,
    offload_param: OffloadDevice | str = OffloadDevice.none,
    engine: Engine | str = Engine.deepspeed,
    deepspeed_config: str | Path | None = None,
    reduce_bucket_size: Count | None = None,
    overlap_comm: bool | None = None,
    prefetch_bucket_size: Count | None = None,
    max_live_parameters: Count | None = None,
    param_persistence_threshold: Count | None = None,
    sub_group_size: Count | None = None,
    hpz_partition_size: Count | None = None,
    cuda_context_gib: float | None = None,
    nccl_gib: float | None = None,
    fragmentation: float | None = None,
    freeze: str | list[str] | None = None,
    lora_rank: int | None = None,
    lora_targets: str | list[str] | None = None,
    lora_dropout: float | None = None,
    dora: bool = False,
    modules_to_save: str | list[str] | None = None,
    qlora: bool = False,
    quant_type: str = "nf4",
    double_quant: bool = False,
    quant_storage: str = "uint8",
    load_in_8bit: bool = False,
    adapter_config: str | Path | None = None,
    optimizer_in_backward: bool = False,
    tp: Count | None = None,
    pp: Count | None = None,
    cp: Count | None = None,
    ep: Count | None = None,
    vpp: Count | None = None,
    pp_schedule: Schedule | str | None = None,
    sequence_parallel: bool = False,
) -> Estimate:
    """Per-GPU memory under each ZeRO stage, or `stage` only: `zeroplan estimate`.

    A model by preset name, YAML spec or HF config.json path, or a bare `params` count; `hardware=None` gives
    no fit verdict. With `deepspeed_config`, its stage, precision, batch, offload and knobs fill the arguments
    left at their defaults (an argument equal to its default counts as left, where the CLI counts any typed
    option). Returns Estimate: `.stages` (one StageEstimate per stage: `.total` bytes, `.fits`,
    `.headroom_bytes`, `.gpu_bytes()`), `.model`, `.recipe`, `.activations`, `.assumptions`, `.warnings`
    (the config's unknown and duplicate keys, which the CLI prints to stderr). The fine-tuning arguments are the
    CLI's --freeze, --lora-*, --qlora, ... (docs/finetune.md); name lists may be lists. `tp`, `pp`, `cp`, `ep`,
    `vpp`, `pp_schedule`, `sequence_parallel` lay the run on a mesh (docs/parallelism.md), as --tp ... do:
    `.scenario.mesh.mesh` then holds it (a Mesh: `.tp`, `.pp`, `.cp`, `.dp`, `.describe()`), and each stage is
    the busiest rank's.
    """
    options = dict(locals())
    only = _stage(options.pop("stage"))
    mesh = _mesh_args(options)
    if mesh.given:
        from zeroplan.scenario.mesh import mesh_estimate

        return mesh_estimate(_scenario_args(options), mesh, only)
    return answers.estimate(_scenario_args(options), only)


def recommend(
    *,
    model: str | Path | None = None,
    params: Count | None = None,
    largest_layer: Count | None = None,
    gpus: Count = _PARALLELISM.gpus,
    nodes: Count | None = None,
    hardware: str | Path = DEFAULT_HARDWARE,
    precision: Precision | str = _SETUP.precision,
    optimizer: Optimizer | str = _SETUP.optimizer,
    seq_len: Count = _SETUP.seq_len,
    checkpointing: Checkpointing | str = _SETUP.checkpointing,
    attention: Attention | str = _SETUP.attention,
    loss: Loss | str = _SETUP.loss,
    engine: Engine | str = Engine.deepspeed,
    global_batch: Count = DEFAULT_GLOBAL_BATCH,
    topology: Topology | str | None = None,
    policy: str = DEFAULT_POLICY,
    policy_file: str | Path | None = None,
    thresholds: Mapping[str, Any] | None = None,
    search_parallelism: bool = False,
    stack: str = "auto",
) -> Advice | LayoutAdvice:
    """What to run -- stage (or the engine's equivalent), offload, micro-batch, checkpointing -- and why.

    `zeroplan advise`, without writing a config. The model defaults to the advisor's (advise/request.py DEFAULT_MODEL) when neither `model` nor `params`
    is given; `checkpointing` is the least to consider. The policy is `policy` ("default" or "article"), then
    `policy_file`'s thresholds, then `thresholds` (a mapping, as `--set` takes them). Returns Advice:
    `.recommendation` (`.stage`, `.micro_batch`, `.grad_accum`, `.fits`, `.summary`), `.trace` (the rules
    asked, in order), `.alternatives`, `.advisories`, `.assumptions`.

    `search_parallelism=True` (or the policy's `search_parallelism`) is `advise --search-parallelism`: the tp x
    pp x cp x dp (x ep) layouts ranked by predicted step time, on `stack` ("auto", "deepspeed", "torchtitan").
    Returns LayoutAdvice: `.recommendation` (a LayoutPlan: `.tp`, `.pp`, `.cp`, `.ep`, `.dp`, `.stage`,
    `.micro_batch`, `.step_time_s`, ...), `.alternatives`, `.trace`, `.counts`, `.assumptions`.
    """
    from zeroplan.advise.layouts.space import Stack
    from zeroplan.advise.request import search_from, searching

    options = dict(locals())
    for name in ("Stack", "search_from", "searching"):
        options.pop(name)
    opts = AdviseArgs(global_batch=_count_text(options.pop("global_batch"), "--global-batch"),
                      topology=_member(Topology, options.pop("topology"), "--topology"), policy=options.pop("policy"),
                      policy_file=_path_text(options.pop("policy_file")), thresholds=options.pop("thresholds"),
                      search_parallelism=options.pop("search_parallelism"),
                      stack=_member(Stack, options.pop("stack"), "--stack").value)  # fmt: skip
    if searching(opts):
        return search_from(_scenario_args(options), opts)
    return advise_from(_scenario_args(options), opts)


def check_plans(*paths: str | Path, ignore: Iterable[str] = (), strict: bool = False) -> CheckReport:
    """Check plan files (YAML; globs are expanded, sorted): `zeroplan check PATHS`.

    A plan that cannot be read is an `invalid-input` finding, not an exception. Returns CheckReport:
    `.results` (per plan: `.file`, `.findings`, `.memory`), `.findings`, `.counts`, `.exit_code` (0 clean,
    1 on errors, or on warnings too when `strict`).
    """
    from zeroplan.check import runner

    if not paths:
        raise UsageError("give plan files (or globs)")
    return runner.check_plans([str(p) for p in paths], ignore=(ignore,) if isinstance(ignore, str) else ignore,
                              strict=strict)  # fmt: skip


def count_params(model: str | Path | Mapping[str, Any] | ModelSpec | FamilyConfig) -> ParamCount:
    """Exact parameter counts, as transformers builds the model: `.num_params`, `.num_embedding_params`,
    `.largest_layer_params` (DeepSpeed's definition), `.num_active_params` (MoE: top-k experts).

    `model`: a preset name, a YAML spec or HF config.json path, a mapping (an HF config.json's contents, with
    `model_type`, or a zeroplan spec, with `config`), or a loaded ModelSpec.
    """
    if isinstance(model, (str, Path)):
        return model_presets.model_facts(str(model))[1]
    from zeroplan.models.families import FamilyConfig, ModelSpec
    from zeroplan.models.hf import HFModel
    from zeroplan.models.params import count_params as count

    if isinstance(model, Mapping):
        model = _model_from_mapping(model)
    if not isinstance(model, (ModelSpec, FamilyConfig, HFModel)):
        raise ZeroplanError(f"count_params takes a preset name, a model file path, a config mapping or a ModelSpec, "
                            f"not {type(model).__name__}")  # fmt: skip
    return count(model)


def model_names() -> list[str]:
    """The model presets' names, sorted (`zeroplan models`)."""
    return preset_names("models")


def hardware_names() -> list[str]:
    """The hardware presets' names, sorted (`zeroplan hardware`)."""
    return preset_names("hardware")


def load_model(name: str | Path) -> ModelSpec:
    """A model by preset name, YAML spec path or HF config.json path: `.name`, `.source`, `.config` (HF keys),
    `.architecture()`."""
    return model_presets.load_model(str(name))


def load_hardware(name: str | Path) -> HardwareSpec:
    """A hardware profile by preset name or YAML path: `.memory_gib`, `.bf16_tflops`, `.source`, ..."""
    return hardware_presets.load_hardware(str(name))


def to_dict(result: Estimate | Advice | LayoutAdvice | CheckReport, *, units: Unit | str = Unit.gib) -> dict[str, Any]:
    """What `--format json` prints for `result`: the same keys and integers (docs/json.md, docs/advisor.md,
    docs/checks.md). `units` is the display unit an estimate names (`"gib"` or `"gb"`); bytes stay bytes."""
    if isinstance(result, Estimate):
        from zeroplan.memory.view import estimate_view

        return estimate_view(result, _member(Unit, units, "--units"))
    from zeroplan.advise.advice import Advice
    from zeroplan.advise.layouts.result import LayoutAdvice
    from zeroplan.check.runner import CheckReport

    if isinstance(result, Advice):
        from zeroplan.advise.view import advice_view

        return advice_view(result)
    if isinstance(result, CheckReport):
        from zeroplan.check.formats import check_view

        return check_view(result)
    from zeroplan.advise.layouts.result import LayoutAdvice

    if isinstance(result, LayoutAdvice):
        from zeroplan.advise.layouts.view import layout_advice_view

        return layout_advice_view(result)
    raise ZeroplanError(f"to_dict takes an Estimate, an Advice, a LayoutAdvice or a CheckReport, "
                        f"not {type(result).__name__}")


# -- plain values -> ScenarioArgs, the options as the CLI holds them --------------------------------------------


def _scenario_args(options: dict[str, Any]) -> scenarios.ScenarioArgs:
    """The options as text and enum members; `given` the ones that differ from the defaults."""
    values = {name: _option(name, value) for name, value in options.items()}
    given = frozenset(name for name, value in values.items() if value != getattr(_RUN_DEFAULTS, name))
    return scenarios.ScenarioArgs(**values, given=given)


def _mesh_args(options: dict[str, Any]) -> MeshArgs:
    """The mesh arguments, popped from `options`, as --tp --pp --cp --ep --vpp --pp-schedule --sequence-parallel."""
    degrees = {name: _count_text(options.pop(name), f"--{name}") for name in MESH_OPTIONS}
    schedule = _member(Schedule, options.pop("pp_schedule"), "--pp-schedule")
    return MeshArgs(**degrees, schedule=schedule, sequence_parallel=options.pop("sequence_parallel"))


def _option(name: str, value: Any) -> Any:
    option = "--" + name.replace("_", "-")
    if name in _COUNTS:
        return _count_text(value, option)
    if name in _ENUMS:
        return _member(_ENUMS[name], value, option)
    if name == "checkpointing":  # an enum member or its text, or every:N
        mode, every = parse_checkpointing(value if isinstance(value, Checkpointing) else str(value))
        return checkpointing_label(mode, every) if every > 1 else mode
    if name in _AMOUNTS:
        return _amount(value, option)
    if name in _PATHS:
        return _path_text(value)
    if name == "hardware":
        return "none" if value is None else str(value)
    if name in _NAME_LISTS and isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if name == "lora_rank":
        return _count_text(value, option)
    if name == "adapter_config":
        return _path_text(value)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)  # True is an int, not a count


def _count_text(value: Any, option: str) -> str | None:
    """A count as the CLI reads it: text stays text; an int or float becomes its digits, for parse_count."""
    if value is None or isinstance(value, str):
        return value
    if not _is_number(value):
        raise ZeroplanError(f"{option} {value!r} is not a number")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return repr(float(value))  # 9e9 -> '9000000000.0'; parse_count refuses fractions, nan and inf


def _amount(value: Any, option: str) -> float | None:
    if value is None:
        return None
    if not _is_number(value):
        raise ZeroplanError(f"{option} {value!r} is not a number")
    return float(value)


def _path_text(value: str | Path | None) -> str | None:
    return None if value is None else str(value)


def _member(kind: type[E], value: E | str | None, option: str) -> E | None:
    """An enum member from itself or its value; UsageError listing the values otherwise (click's exit 2)."""
    if value is None or isinstance(value, kind):
        return value
    try:
        return kind(value)
    except (ValueError, TypeError):
        raise UsageError(f"{option} {value!r} is not one of: {', '.join(str(m.value) for m in kind)}") from None


def _stage(value: int | None) -> int | None:
    """None (every stage) or 0-3, as --stage takes it."""
    if value is None:
        return None
    if _is_number(value) and isinstance(value, numbers.Integral) and min(ZeroStage) <= value <= max(ZeroStage):
        return int(value)
    raise UsageError(f"--stage {value!r} is not one of: {', '.join(str(int(s)) for s in ZeroStage)}")


def _model_from_mapping(data: Mapping[str, Any]) -> ModelSpec:
    """An HF config.json's contents (it has `model_type`) or a zeroplan YAML spec (it has `config`)."""
    if "config" in data:
        return model_presets.model_from_data(dict(data), "model mapping")
    name = str(data.get("_name_or_path") or data.get("model_type") or "model")
    return model_presets.model_from_data(dict(data), "config mapping", hf_name=name)
