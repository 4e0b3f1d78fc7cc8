"""The configs the parallelism search writes for its choice: a DeepSpeed config with AutoTP (pp = cp = ep = 1) or a
torchtitan job config's sections (any mesh). Refused (ZeroplanError) when nothing fits or the stack differs. Pure:
the TOML text is built here (a few scalar keys; no dependency), nothing is written.
"""

from __future__ import annotations

from zeroplan.advise.layouts.result import LayoutAdvice, LayoutPlan
from zeroplan.advise.layouts.space import Stack, torchtitan_layers_per_stage
from zeroplan.deepspeed.emit import ds_config
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.memory.setup import Checkpointing, ZeroStage
from zeroplan.models.mesh import Schedule

# torchtitan's TOML job config (pytorch/torchtitan@238fa9953e4aec2a62582121564273d7cbb1e9f1:
# torchtitan/config/job_config.py, the last release of the TOML format before its Python config registry): the keys
# written, by section. tests/test_layout_configs.py checks each against that file's dataclass fields.
TORCHTITAN_KEYS = {
    "training": ("local_batch_size", "global_batch_size", "seq_len"),
    "parallelism": ("data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel", "pipeline_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "context_parallel_degree", "expert_parallel_degree", "expert_tensor_parallel_degree"),
    "activation_checkpoint": ("mode",),
}


def _chosen(advice: LayoutAdvice, stack: Stack, option: str) -> LayoutPlan:
    plan = advice.recommendation
    if plan is None:
        raise ZeroplanError("nothing to emit: no layout fits (see the trace's search.none)")
    if plan.stack is not stack:
        other = "--emit-torchtitan" if plan.stack is Stack.torchtitan else "--emit-deepspeed"
        raise UsageError(f"{option}: the chosen layout runs on {plan.stack.value} ({plan.describe()}); use {other} "
                         f"PATH, or --stack {stack.value} to search {stack.value} layouts only")
    return plan


def autotp_config(advice: LayoutAdvice) -> dict:
    """The ds_config of a DeepSpeed choice: ZeRO as planned plus `tensor_parallel.autotp_size` = tp.

    No train_batch_size with tp > 1: DeepSpeed builds its config before AutoTP's groups and, without an mpu, checks
    train_batch_size = micro x accumulation x the whole world size (deepspeed/__init__.py, runtime/config.py
    v0.19.5), while the data-parallel degree under AutoTP is GPUs / tp; given micro-batch and accumulation,
    DeepSpeed derives it without the check."""
    plan = _chosen(advice, Stack.deepspeed, "--emit-deepspeed")  # AutoTP x ZeRO, tp x dp: no schedule to write
    scn = advice.scenario
    knobs = scn.knobs.__class__(**{**_knob_fields(scn.knobs), "overlap_comm": scn.knobs.overlap_comm_for(plan.stage)})
    config = ds_config(plan.stage, knobs, scn.setup.precision, micro_batch=plan.micro_batch,
                       grad_accum=plan.grad_accum, dp=plan.dp)
    if plan.tp > 1:
        del config["train_batch_size"]
        config["tensor_parallel"] = {"autotp_size": plan.tp}
    return config


def _knob_fields(knobs) -> dict:
    from dataclasses import fields

    return {f.name: getattr(knobs, f.name) for f in fields(knobs)}


def torchtitan_sections(advice: LayoutAdvice) -> dict[str, dict]:
    """The torchtitan job-config sections of the choice (TORCHTITAN_KEYS), as values."""
    plan = _chosen(advice, Stack.torchtitan, "--emit-torchtitan")
    replicate, shard = (plan.dp, 1) if plan.stage is ZeroStage.zero0 else (1, plan.dp)
    per_rank = plan.micro_batch * plan.grad_accum
    parallelism = {
        "data_parallel_replicate_degree": replicate, "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": "always" if plan.stage is ZeroStage.zero3 else "never",
        "tensor_parallel_degree": plan.tp, "disable_loss_parallel": False,
        "pipeline_parallel_degree": plan.pp, "context_parallel_degree": plan.cp,
        "expert_parallel_degree": plan.ep, "expert_tensor_parallel_degree": plan.tp if plan.ep > 1 else 1,
    }
    if plan.pp > 1:
        parallelism.update(_pipeline(plan, advice.scenario.arch.num_layers))
    training = {"local_batch_size": per_rank if plan.pp > 1 else plan.micro_batch,
                "global_batch_size": advice.global_batch, "seq_len": advice.scenario.setup.seq_len}
    mode = "full" if plan.checkpointing is Checkpointing.full else "none"
    return {"training": training, "parallelism": parallelism, "activation_checkpoint": {"mode": mode}}


# torch.distributed.pipelining's names for the schedules the search weighs (torch 2.13 schedules.py
# get_schedule_class, which torchtitan calls on pipeline_parallel_schedule).
TORCH_SCHEDULE_NAMES = {Schedule.one_f_one_b: "1F1B", Schedule.interleaved: "Interleaved1F1B"}


def _pipeline(plan: LayoutPlan, num_layers: int) -> dict:
    """The pipeline keys of a pp > 1 choice, so that torchtitan builds the stages zeroplan's mesh model split.

    pp x vpp stages (vpp 1 under 1F1B): weights 0 where the layers divide (torchtitan's
    generate_llm_fqn_per_model_part then splits evenly), else its default weights of 1
    (models.mesh.stage_layer_counts). Under Interleaved1F1B torchtitan builds 2 stages per rank unless
    pipeline_parallel_layers_per_stage is set; for vpp > 2 it is written so that ceil((L + weights) / it) = pp x vpp
    (pytorch/torchtitan@238fa99: torchtitan/distributed/pipeline_parallel.py pipeline_llm)."""
    stages = plan.pp * plan.vpp
    less = 1 if num_layers % stages else 0
    keys = {"pipeline_parallel_schedule": TORCH_SCHEDULE_NAMES[plan.schedule],
            "pipeline_parallel_microbatch_size": plan.micro_batch,
            "pipeline_parallel_first_stage_less_layers": less, "pipeline_parallel_last_stage_less_layers": less}
    if plan.vpp > 2:
        per = torchtitan_layers_per_stage(num_layers, plan.pp, plan.vpp)
        if per is None:  # the search weighs only counts torchtitan can be told (space.virtual_stages)
            raise ZeroplanError(f"torchtitan cannot be told {plan.pp} x {plan.vpp} virtual stages for {num_layers} "
                                "layers (no pipeline_parallel_layers_per_stage gives that many)")
        keys["pipeline_parallel_layers_per_stage"] = per
    return keys


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def torchtitan_toml(advice: LayoutAdvice) -> str:
    """The sections as TOML, headed by a comment naming the choice: merge them into the job's config file."""
    plan = advice.recommendation
    lines = [f"# zeroplan advise --search-parallelism: {plan.describe() if plan else ''}",
             "# merge these sections into your torchtitan job config (keys: torchtitan/config/job_config.py)"]
    for section, values in torchtitan_sections(advice).items():
        lines += ["", f"[{section}]"] + [f"{key} = {_toml_value(v)}" for key, v in values.items()]
    return "\n".join(lines) + "\n"
