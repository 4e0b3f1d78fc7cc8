"""A training run, estimated (`zeroplan estimate`), advised (`zeroplan advise`) or checked from plan files
(`zeroplan check`): keyword-only functions over the CLI's options, with the CLI's defaults (the dataclasses in
memory/setup.py, DEFAULT_HARDWARE, advise/request.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeroplan.advise.request import (
    DEFAULT_GLOBAL_BATCH,
    DEFAULT_POLICY,
    AdviseArgs,
    advise_from,
)
from zeroplan.api.arguments import (
    Count,
    check_needs,
    count_text,
    member,
    mesh_args,
    path_text,
    scenario_args,
    stage_number,
    typed,
)
from zeroplan.errors import UsageError
from zeroplan.hardware.presets import DEFAULT_HARDWARE
from zeroplan.hardware.spec import Topology
from zeroplan.memory.estimate import Estimate
from zeroplan.memory.setup import (
    Attention,
    Checkpointing,
    Engine,
    Float8Recipe,
    Loss,
    OffloadDevice,
    Optimizer,
    OptimizerImpl,
    Parallelism,
    PostTraining,
    Precision,
    TrainingLoop,
    TrainingSetup,
)
from zeroplan.models.mesh import CpComm, Schedule
from zeroplan.scenario import answers

if TYPE_CHECKING:  # loaded by the functions that return them: an estimate never imports the advisor or the checks
    from zeroplan.advise.advice import Advice
    from zeroplan.advise.layouts.result import LayoutAdvice
    from zeroplan.check.runner import CheckReport

_SETUP, _PARALLELISM = TrainingSetup(), Parallelism()


@typed
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
    optimizer_impl: OptimizerImpl | str | None = None,
    seq_len: Count = _SETUP.seq_len,
    micro_batch: Count = _SETUP.micro_batch,
    grad_accum: Count = _SETUP.grad_accum,
    checkpointing: Checkpointing | str = _SETUP.checkpointing,
    attention: Attention | str = _SETUP.attention,
    loss: Loss | str = _SETUP.loss,
    post_training: PostTraining | str = _SETUP.post_training,
    teacher: str | Path | None = None,
    compile: bool = _SETUP.compile,
    float8: Float8Recipe | str = _SETUP.float8,
    training_loop: TrainingLoop | str | None = None,
    offload_optimizer: OffloadDevice | str = OffloadDevice.none,
    offload_param: OffloadDevice | str = OffloadDevice.none,
    engine: Engine | str = Engine.deepspeed,
    reduce_dtype: str | None = None,
    no_sync: bool = False,
    adapter_wrap: str = "own",
    float8_all_gather: bool = False,
    deepspeed_config: str | Path | None = None,
    from_file: str | Path | None = None,
    from_kind: str | None = None,
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
    calibration: str | Path | None = None,
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
    adapter_dtype: str = "fp32",
    qlora_stack: str = "peft",
    bnb_version: str = "0.50.2",
    tp: Count | None = None,
    pp: Count | None = None,
    cp: Count | None = None,
    ep: Count | None = None,
    vpp: Count | None = None,
    pp_schedule: Schedule | str | None = None,
    sequence_parallel: bool = False,
    cp_comm: CpComm | str = CpComm.p2p,
    pp_first_layers: Count | None = None,
    pp_last_layers: Count | None = None,
) -> Estimate:
    """Per-GPU memory under each ZeRO stage, or `stage` only: `zeroplan estimate`.

    A model by preset name, YAML spec or HF config.json path, or a bare `params` count; `hardware=None` gives
    no fit verdict. With `deepspeed_config`, its stage, precision, batch, offload and knobs fill the arguments
    left at their defaults (an argument equal to its default counts as left, where the CLI counts any typed
    option); `from_file` (and `from_kind`) reads an Accelerate, LLaMA-Factory or axolotl file as --from does.
    Returns Estimate: `.stages` (one StageEstimate per stage: `.total` bytes, `.fits`, `.headroom_bytes`,
    `.gpu_bytes()`, `.total_gib`, `.headroom_gib`, `.usable_gib`), `.stage(n)` (the stage numbered n), `.model`, `.recipe`, `.activations`, `.assumptions`, `.warnings`
    (the config's unknown and duplicate keys, which the CLI prints to stderr). The fine-tuning arguments are the
    CLI's --freeze, --lora-*, --qlora, ... (docs/finetune.md); name lists may be lists. `tp`, `pp`, `cp`, `ep`,
    `vpp`, `pp_schedule`, `sequence_parallel`, `cp_comm` ("p2p" ring attention, "a2a" DeepSpeed-Ulysses),
    `pp_first_layers`, `pp_last_layers` lay the run on a mesh (docs/parallelism.md), as --tp ... do:
    `.scenario.mesh.mesh` then holds it (a Mesh: `.tp`, `.pp`, `.cp`, `.dp`, `.describe()`), and each stage is
    the busiest rank's. `calibration`: a `zeroplan calibrate --save` file, as --calibration (docs/calibrate.md). `reduce_dtype`,
    `no_sync`, `adapter_wrap`: the FSDP engine settings, as --reduce-dtype, --no-sync, --adapter-wrap (docs/engines.md). `compile`: torch.compile
    of each block, as --compile; `float8`: "none", "tensorwise", "rowwise" or "rowwise-with-gw-hp", as --float8, and
    `float8_all_gather` as --float8-all-gather (docs/float8.md); `training_loop`: "trainer" or "litgpt", as --training-loop (None: litgpt under `qlora_stack="litgpt"`, else trainer; docs/activations.md).
    """
    options = dict(locals())
    check_needs(estimate, options)
    only = stage_number(options.pop("stage"))
    mesh = mesh_args(options)
    if mesh.given:
        from zeroplan.scenario.mesh import mesh_estimate

        return mesh_estimate(scenario_args(options), mesh, only)
    return answers.estimate(scenario_args(options), only)


@typed
def recommend(
    *,
    model: str | Path | None = None,
    params: Count | None = None,
    largest_layer: Count | None = None,
    gpus: Count = _PARALLELISM.gpus,
    nodes: Count | None = None,
    hardware: str | Path | None = DEFAULT_HARDWARE,
    precision: Precision | str = _SETUP.precision,
    optimizer: Optimizer | str = _SETUP.optimizer,
    optimizer_impl: OptimizerImpl | str | None = None,
    seq_len: Count = _SETUP.seq_len,
    checkpointing: Checkpointing | str = _SETUP.checkpointing,
    attention: Attention | str = _SETUP.attention,
    loss: Loss | str = _SETUP.loss,
    post_training: PostTraining | str = _SETUP.post_training,
    teacher: str | Path | None = None,
    engine: Engine | str = Engine.deepspeed,
    from_file: str | Path | None = None,
    from_kind: str | None = None,
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
    adapter_dtype: str = "fp32",
    qlora_stack: str = "peft",
    bnb_version: str = "0.50.2",
    global_batch: Count = DEFAULT_GLOBAL_BATCH,
    topology: Topology | str | None = None,
    policy: str = DEFAULT_POLICY,
    policy_file: str | Path | None = None,
    thresholds: Mapping[str, Any] | None = None,
    search_parallelism: bool = False,
    stack: str = "auto",
    calibration: str | Path | None = None,
) -> Advice | LayoutAdvice:
    """What to run -- stage (or the engine's equivalent), offload, micro-batch, checkpointing -- and why.

    `zeroplan advise`, without writing a config. The model defaults to the advisor's (advise/request.py DEFAULT_MODEL) when neither `model` nor `params`
    is given; `checkpointing` is the least to consider. The policy is `policy` ("default" or "article"), then
    `policy_file`'s thresholds, then `thresholds` (a mapping, as `--set` takes them). Returns Advice:
    `.recommendation` (`.stage`, `.micro_batch`, `.grad_accum`, `.fits`, `.summary`), `.trace` (the rules
    asked, in order), `.alternatives`, `.advisories`, `.assumptions`. The fine-tuning arguments and `from_file`
    are estimate's (docs/finetune.md, docs/inputs.md).

    `search_parallelism=True` (or the policy's `search_parallelism`) is `advise --search-parallelism`: the tp x
    pp x cp x dp (x ep) layouts ranked by predicted step time, on `stack` ("auto", "deepspeed", "torchtitan").
    Returns LayoutAdvice: `.recommendation` (a LayoutPlan: `.tp`, `.pp`, `.cp`, `.ep`, `.dp`, `.stage`,
    `.micro_batch`, `.step_time_s`, ...), `.alternatives`, `.trace`, `.counts`, `.assumptions`. `calibration` as
    in `estimate`.
    """
    options = dict(locals())
    check_needs(recommend, options)
    from zeroplan.advise.layouts.space import Stack
    from zeroplan.advise.request import search_from, searching

    opts = AdviseArgs(global_batch=count_text(options.pop("global_batch"), "--global-batch"),
                      topology=member(Topology, options.pop("topology"), "--topology"), policy=options.pop("policy"),
                      policy_file=path_text(options.pop("policy_file")), thresholds=options.pop("thresholds"),
                      search_parallelism=options.pop("search_parallelism"),
                      stack=member(Stack, options.pop("stack"), "--stack").value)  # fmt: skip
    if searching(opts):
        return search_from(scenario_args(options), opts)
    return advise_from(scenario_args(options), opts)


@typed
def check_plans(
    *plans: str | Path,
    ignore: Iterable[str] = (),
    strict: bool = False,
    deepspeed_config: str | Path | None = None,
    from_file: str | Path | None = None,
    from_kind: str | None = None,
    model: str | Path | None = None,
    params: Count | None = None,
    largest_layer: Count | None = None,
    gpus: Count = _PARALLELISM.gpus,
    nodes: Count | None = None,
    hardware: str | Path | None = DEFAULT_HARDWARE,
    precision: Precision | str = _SETUP.precision,
    optimizer: Optimizer | str = _SETUP.optimizer,
    seq_len: Count = _SETUP.seq_len,
    micro_batch: Count = _SETUP.micro_batch,
    grad_accum: Count = _SETUP.grad_accum,
    checkpointing: Checkpointing | str = _SETUP.checkpointing,
    attention: Attention | str = _SETUP.attention,
    loss: Loss | str = _SETUP.loss,
    post_training: PostTraining | str = _SETUP.post_training,
    teacher: str | Path | None = None,
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
    adapter_dtype: str = "fp32",
    qlora_stack: str = "peft",
    bnb_version: str = "0.50.2",
    optimizer_impl: OptimizerImpl | str | None = None,
) -> CheckReport:
    """`zeroplan check`: plan files (YAML; globs expanded, sorted), or one `deepspeed_config` or `from_file` on the
    run the other arguments describe, as the CLI's options do (a plan states its own run: plans with run
    arguments are a UsageError). A plan that cannot be read is an `invalid-input` finding, not an exception.
    Returns CheckReport: `.results` (per plan: `.file`, `.findings`, `.memory`), `.findings`, `.counts`,
    `.exit_code` (0 clean, 1 on errors, or on warnings too when `strict`).
    """
    options = dict(locals())
    from zeroplan.check import runner

    paths, ignore, strict = [str(p) for p in options.pop("plans")], options.pop("ignore"), options.pop("strict")
    ignore = (ignore,) if isinstance(ignore, str) else tuple(ignore)
    args = scenario_args(options)
    runner.check_usage(paths, args, machine_output=True, output=None)
    if args.from_file:
        return runner.check_from_file(args, ignore=ignore, strict=strict)
    if args.deepspeed_config:
        return runner.check_deepspeed_config(args.deepspeed_config, args, ignore=ignore, strict=strict)
    return runner.check_plans(paths, ignore=ignore, strict=strict)
