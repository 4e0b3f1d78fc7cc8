"""Options that mean something only beside another: given alone they would change nothing, or change the answer
to a question nobody asked, so they are refused in one line naming both (docs/hardening.md, "Nonsense").

Every option of every command is either in NEEDS (what it needs) or in STANDALONE (it means something alone);
tests/test_hostile_props.py derives the option list from the typer app and holds that. The CLI's error boundary
(cli/common.py `run`) and the Python API (api/runs.py) both call `check_needs` with the options given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from zeroplan.errors import UsageError


def _value(values: Mapping[str, Any], name: str) -> Any:
    value = values.get(name)
    return getattr(value, "value", value)


def _count(values: Mapping[str, Any], name: str) -> int | None:
    """The option's count, or None when it is not given or does not parse (its own check says why, later)."""
    value = values.get(name)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    from zeroplan.errors import ZeroplanError
    from zeroplan.units import parse_count

    try:
        return parse_count(str(value))
    except ZeroplanError:
        return None


def _above_one(name: str) -> Callable[[Mapping[str, Any], Set[str]], bool]:
    return lambda values, given: name in given and (_count(values, name) or 2) > 1


def _given_any(*names: str) -> Callable[[Mapping[str, Any], Set[str]], bool]:
    return lambda values, given: any(n in given or _set(values.get(n)) for n in names)


def _set(value: Any) -> bool:
    """An option holds a value: not its unset None, False or empty list (a repeatable --from with no file)."""
    return value is not None and value is not False and not (isinstance(value, (list, tuple)) and not value)


def _is(name: str, *allowed: str) -> Callable[[Mapping[str, Any], Set[str]], bool]:
    return lambda values, given: name not in values or _value(values, name) in allowed


def _not(name: str, *refused: str) -> Callable[[Mapping[str, Any], Set[str]], bool]:
    return lambda values, given: name not in values or _value(values, name) not in refused


_LORA = ("lora_rank", "adapter_config", "from_file")  # a --from file may set LoRA itself
_INTERLEAVED = ("interleaved-1f1b", "interleaved-zb", "zbv")  # schedules with virtual stages (models/mesh.py)
_WRITES = ("html", "emit_deepspeed", "emit_accelerate", "emit_torchtitan", "output", "save")


@dataclass(frozen=True)
class Needs:
    """`option` means something only when `met(values, given)`; `what` says what it needs, as typed."""

    option: str
    what: str
    met: Callable[[Mapping[str, Any], Set[str]], bool]
    message: str = ""  # the whole message, where it says more than '--option needs what'


NEEDS = (
    Needs("pp_schedule", "--pp 2 or more",  # 1f1b is what runs without a pipeline too: naming it changes nothing
          lambda values, given: _value(values, "pp_schedule") == "1f1b" or _above_one("pp")(values, given)),
    Needs("vpp", "--pp 2 or more", _above_one("pp")),
    Needs("pp_first_layers", "--pp 2 or more", _above_one("pp")),
    Needs("pp_last_layers", "--pp 2 or more", _above_one("pp")),
    Needs("sequence_parallel", "--tp 2 or more", _above_one("tp")),
    Needs("cp_comm", "--cp 2 or more", _above_one("cp")),
    Needs("quant_type", "--qlora", _given_any("qlora")),
    Needs("double_quant", "--qlora", _given_any("qlora")),
    Needs("quant_storage", "--qlora", _given_any("qlora")),
    Needs("lora_targets", "LoRA (--lora-rank or --adapter-config)", _given_any(*_LORA)),
    Needs("lora_dropout", "LoRA (--lora-rank or --adapter-config)", _given_any(*_LORA)),
    Needs("dora", "LoRA (--lora-rank or --adapter-config)", _given_any(*_LORA)),
    Needs("modules_to_save", "LoRA (--lora-rank or --adapter-config)", _given_any(*_LORA)),
    Needs("qlora_stack", "--qlora", _given_any("qlora", "from_file")),
    Needs("bnb_version", "a bitsandbytes base (--qlora or --load-in-8bit)", _given_any("qlora", "load_in_8bit", "from_file")),
    Needs("buffer_factor", "--method deepspeed", _is("method", "deepspeed")),
    # torchao's float8 all-gather casts with one tensorwise scale (memory.float8); outside FSDP2 its engine check says so
    Needs("float8_all_gather", "--float8 tensorwise", lambda values, given: _value(values, "float8") == "tensorwise"
          or "from_file" in given),
    Needs("teacher", "--post-training kd", lambda values, given: _value(values, "post_training") == "kd"
          or "from_file" in given),
    Needs("from_kind", "--from", _given_any("from_file"), "--from-kind names the kind of a --from file: give --from FILE"),
    Needs("force", "a file to write (--html, --emit-*, --output)", _given_any(*_WRITES)),
    Needs("max_micro_batch", "--sweep", _given_any("sweep")),
    Needs("stack", "--search-parallelism (or a policy that sets it)",
          _given_any("search_parallelism", "policy_file", "set")),
    Needs("emit_torchtitan", "--search-parallelism (or a policy that sets it)",
          _given_any("search_parallelism", "policy_file", "set")),
    # DeepSpeed's zero_optimization knobs mean nothing to another engine
    *(Needs(knob, "--engine deepspeed", _is("engine", "deepspeed")) for knob in (
        "reduce_bucket_size", "overlap_comm", "prefetch_bucket_size", "max_live_parameters",
        "param_persistence_threshold", "sub_group_size", "hpz_partition_size")),
    # ZeRO-3's own knobs and parameter offload, beside a --stage that is not 3
    *(Needs(knob, "ZeRO-3 (not --stage 0, 1 or 2)", _not("stage", 0, 1, 2)) for knob in (
        "prefetch_bucket_size", "max_live_parameters", "param_persistence_threshold", "hpz_partition_size")),
)  # fmt: skip

# Options that mean something alone (each command's own, the run's shape, inputs and outputs).
STANDALONE = frozenset({
    "model", "params", "largest_layer", "gpus", "nodes", "hardware", "stage", "precision", "optimizer",
    "fp32_grad_accum", "seq_len", "micro_batch", "grad_accum", "checkpointing", "attention", "loss", "post_training",
    "offload_optimizer", "offload_param", "cuda_context_gib", "nccl_gib", "fragmentation", "deepspeed_config",
    "from_file", "engine", "freeze", "lora_rank", "qlora", "load_in_8bit", "adapter_config", "optimizer_in_backward",
    "method", "tp", "pp", "cp", "ep", "units", "fmt", "html", "global_batch", "topology", "policy", "policy_file",
    "set", "emit_deepspeed", "emit_accelerate", "search_parallelism", "plans", "ignore", "strict", "output", "mfu",
    "sweep", "stages", "gpu_counts", "micro_batches", "assignments", "checkpointings", "offload_optimizers",
    "offload_params", "calibration", "records", "plan", "save", "optimizer_impl", "training_loop", "float8",
})  # fmt: skip

# Options that need another and are refused without it by their own check, in their own words (exit 1):
# --adapter-dtype without adapters (tests/test_finetune_gpu_terms.py); the FSDP engine settings outside their engine
# (--reduce-dtype outside fsdp2, --no-sync outside fsdp/fsdp2, --adapter-wrap block outside fsdp with LoRA:
# tests/test_fsdp_grads.py); --compile outside a measured family, with eager attention, fp32, a mesh or a peer
# estimator (tests/test_compile_activations.py, tests/test_compile_ac.py).
REFUSED_ELSEWHERE = frozenset({"adapter_dtype", "reduce_dtype", "no_sync", "adapter_wrap", "compile"})

# What DeepSpeed's estimator functions read (deepspeed/estimator.py: the parameter counts and the GPUs); the
# others describe zeroplan's own model of a run and would change nothing in their tables.
DEEPSPEED_READS = frozenset({"model", "params", "largest_layer", "gpus", "nodes", "hardware", "from_file",
                             "from_kind", "method", "buffer_factor", "units", "fmt"})  # fmt: skip


# The mesh options: `estimate --method deepspeed` refuses them itself ("DeepSpeed's estimator functions know data
# parallelism only", cli/estimate.py).
MESH = frozenset({"tp", "pp", "cp", "ep", "vpp", "pp_schedule", "sequence_parallel", "cp_comm", "pp_first_layers",
                  "pp_last_layers"})  # fmt: skip


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-").replace("from-file", "from").replace("fmt", "format")


def check_needs(values: Mapping[str, Any], given: Set[str]) -> None:
    """UsageError naming the first option given without what it needs; `values` the command's options."""
    for rule in NEEDS:
        if rule.option in given and rule.option in values and not rule.met(values, given):
            raise UsageError(rule.message or f"{_flag(rule.option)} needs {rule.what}")
    if _value(values, "method") == "deepspeed" and (unread := sorted(set(given) - DEEPSPEED_READS - MESH)):
        names = ", ".join(_flag(name) for name in unread)
        raise UsageError(f"--method deepspeed reproduces DeepSpeed's estimator functions, which do not read {names}")
