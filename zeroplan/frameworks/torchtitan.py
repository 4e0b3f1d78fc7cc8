"""A torchtitan job config TOML (`torchrun ... torchtitan/train.py --job.config_file FILE`): model, batch, mesh, AC.

Sections and defaults as torchtitan's JobConfig declares them (pytorch/torchtitan@238fa99, the last commit with
TOML job configs: torchtitan/config/job_config.py): `[model]` name and flavor (torchtitan/models/*/__init__.py);
`[training]` local_batch_size 8, seq_len 2048, mixed_precision_param bfloat16 (FSDP2's MixedPrecisionPolicy over
fp32 sharded parameters: bf16-mixed); `[parallelism]` data_parallel_shard_degree -1 (every rank left), the other
degrees 1; `[activation_checkpoint]` mode selective, selective_ac_option "2" (every 2nd layer) or "op";
`[optimizer]` AdamW; Float8 (`model.converters` "float8" or "quantize.linear.float8" with its `[float8]` or
`[quantize.linear.float8]` section, or 9dec370's `[float8] enable_float8_linear`): _float8 below. A tensor-,
pipeline-, context- or expert-parallel mesh, HSDP, MX and other converters, and compile are refused in one line. Docs: https://github.com/pytorch/torchtitan/blob/main/docs/. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import FileKeys, FrameworkRun, NotModelled, Positive, Taken, validate_keys
from zeroplan.memory.setup import Checkpointing, Engine, Float8Recipe, OffloadDevice, Optimizer, Precision

# (model.name, model.flavor) -> the zeroplan preset of the same shapes
FLAVORS = {("llama3", "8B"): "llama-3.1-8b", ("llama3", "70B"): "llama-3.1-70b", ("llama3", "405B"): "llama-3.1-405b",
           ("qwen3", "8B"): "qwen3-8b", ("qwen3", "32B"): "qwen3-32b", ("deepseek_v3", "671B"): "deepseek-v3",
           ("llama4", "17bx16e"): "llama-4-scout", ("llama4", "17bx128e"): "llama-4-maverick"}  # fmt: skip
MESH = {"tensor_parallel_degree": "tensor parallelism", "pipeline_parallel_degree": "pipeline parallelism",
        "context_parallel_degree": "context parallelism", "expert_parallel_degree": "expert parallelism",
        "data_parallel_replicate_degree": "HSDP (replicated shards)"}  # fmt: skip
OPTIMIZERS = {"AdamW": Optimizer.adamw, "Adam": Optimizer.adamw}
FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")  # the name before and after torchtitan's quantize section
RECIPES = {None: Float8Recipe.tensorwise, "tensorwise": Float8Recipe.tensorwise, "rowwise": Float8Recipe.rowwise,
           "rowwise_with_gw_hp": Float8Recipe.rowwise_with_gw_hp}
HEAD_FQN = "output"  # torchtitan's Llama output head (filter_fqns = ["output"] in its train_configs)


class Training(FileKeys):
    local_batch_size: Positive = 8
    batch_size: Positive | None = None  # local_batch_size's older name
    seq_len: Positive = 2048
    mixed_precision_param: Literal["bfloat16", "float32"] = "bfloat16"
    enable_cpu_offload: bool = False


class TitanKeys(FileKeys):
    model: dict[str, Any] = {}
    training: Training = Training()
    parallelism: dict[str, Any] = {}
    activation_checkpoint: dict[str, Any] = {}
    optimizer: dict[str, Any] = {}
    compile: dict[str, Any] = {}
    float8: dict[str, Any] = {}


def read_torchtitan(data: Mapping, origin: str) -> FrameworkRun:
    keys = validate_keys(TitanKeys, data, origin)
    refuse = NotModelled(origin)
    model = (str(keys.model.get("name", "llama3")), str(keys.model.get("flavor", "debugmodel")))
    preset = FLAVORS.get(model)
    taken = [Taken("model.flavor", f"{model[0]} {model[1]}", "model", preset, f"--model {preset}" if preset else
                   f"{model[0]} {model[1]}: no zeroplan preset has this flavor's shapes; give --model")]  # fmt: skip
    taken += _float8(keys, data, refuse)
    if keys.compile.get("enable"):  # torchtitan/models/llama3/infra/parallelize.py apply_compile: each block
        components = keys.compile.get("components", ["model", "loss"])  # config/job_config.py Compile's default
        if "model" in components:
            taken.append(Taken("compile.enable", True, "compile", True, "--compile (each TransformerBlock compiled"
                               + ("; the compiled loss counted as eager's, an upper bound)" if "loss" in components else ")")))
    training, stated = keys.training, keys.training.model_fields_set
    micro = training.batch_size or training.local_batch_size
    taken += [Taken("training.local_batch_size", micro, "micro_batch", str(micro), f"--micro-batch {micro}",
                    not ({"local_batch_size", "batch_size"} & stated)),
              Taken("training.seq_len", training.seq_len, "seq_len", str(training.seq_len), f"--seq-len {training.seq_len}",
                    "seq_len" not in stated)]  # fmt: skip
    precision = Precision.bf16_mixed if training.mixed_precision_param == "bfloat16" else Precision.fp32
    taken.append(Taken("training.mixed_precision_param", training.mixed_precision_param, "precision", precision,
                       f"--precision {precision.value} (FSDP2 casts the fp32 shards to it)", "mixed_precision_param" not in stated))
    taken += _mesh(keys.parallelism, refuse)
    if training.enable_cpu_offload:
        taken += [Taken("training.enable_cpu_offload", True, "offload_param", OffloadDevice.cpu, "--offload-param cpu"),
                  Taken("training.enable_cpu_offload", True, "offload_optimizer", OffloadDevice.cpu, "--offload-optimizer cpu")]
    taken += _checkpointing(keys.activation_checkpoint, refuse)
    name = str(keys.optimizer.get("name", "AdamW"))
    if name in OPTIMIZERS:
        taken.append(Taken("optimizer.name", name, "optimizer", OPTIMIZERS[name], "--optimizer adamw", "name" not in keys.optimizer))
    else:
        refuse.add("optimizer.name", name, "an optimizer other than AdamW and Adam")
    refuse.raise_any()
    return FrameworkRun(FromKind.torchtitan, origin, tuple(taken))


def _float8(keys: TitanKeys, data: Mapping, refuse: NotModelled) -> list[Taken]:
    """torchtitan's Float8 converter (pytorch/torchtitan@238fa99 torchtitan/components/quantization/float8.py,
    config/job_config.py Float8Linear; 9dec370 torchtitan/float8.py): recipe_name None is tensorwise (dynamic
    scaling), the all-gather in float8 only beside it and only when FSDP shards (dp_shard_enabled); every linear but
    the filtered ones is converted, so the head must be filtered (as torchtitan's own configs do)."""
    converters = keys.model.get("converters") or []
    converters = [converters] if isinstance(converters, str) else list(converters)
    if other := [c for c in converters if c not in FLOAT8_CONVERTERS]:
        refuse.add("model.converters", ", ".join(map(str, other)), "MX / grouped-mm / other converters (only "
                   "float8 linears are modelled)")
    legacy = bool(keys.float8.get("enable_float8_linear"))  # 9dec370: [float8] enable_float8_linear, head skipped
    if not legacy and not any(c in FLOAT8_CONVERTERS for c in converters):
        return []
    quantize = (data.get("quantize") or {}).get("linear", {}).get("float8") if isinstance(data.get("quantize"), Mapping) else None
    name, section = ("quantize.linear.float8", quantize) if isinstance(quantize, Mapping) else ("float8", keys.float8)
    recipe = section.get("recipe_name")
    if recipe not in RECIPES:
        refuse.add(f"{name}.recipe_name", recipe, "a float8 recipe other than tensorwise, rowwise, rowwise_with_gw_hp")
        return []
    fqns = [str(f) for f in section.get("filter_fqns", [])]
    if not legacy and HEAD_FQN not in fqns:
        refuse.add(f"{name}.filter_fqns", fqns, f'without "{HEAD_FQN}" the output head is converted too (modelled '
                   "with the head in bf16)")
    if extra := [f for f in fqns if f != HEAD_FQN]:
        refuse.add(f"{name}.filter_fqns", ", ".join(extra), "only some blocks' linears converted")
    for key in ("emulate",) + tuple(k for k in section if k.startswith("scaling_type") and section[k] != "dynamic"):
        if section.get(key):
            refuse.add(f"{name}.{key}", section[key], "emulated or delayed float8 scaling")
    key = "model.converters" if not legacy else "float8.enable_float8_linear"
    how = "" if "recipe_name" in section else "recipe_name unset: "
    taken = [Taken(key, ", ".join(converters) or True, "float8", RECIPES[recipe], f"--float8 {RECIPES[recipe].value} "
                   f"({how}torchao Float8Linear on the blocks' linears, the head in bf16)")]
    gather = bool(section.get("enable_fsdp_float8_all_gather")) and recipe is None
    shard = keys.parallelism.get("data_parallel_shard_degree", -1)
    if section.get("enable_fsdp_float8_all_gather") and recipe is not None:
        refuse.add(f"{name}.enable_fsdp_float8_all_gather", True, "beside a recipe_name (torchtitan asserts against it)")
    elif gather and shard != 1:
        taken.append(Taken(f"{name}.enable_fsdp_float8_all_gather", True, "float8_all_gather", True,
                           "--float8-all-gather (precompute_float8_dynamic_scale_for_fsdp: one scale per weight, "
                           "a few bytes)"))
    return taken


def _mesh(section: Mapping, refuse: NotModelled) -> list[Taken]:
    for key, what in MESH.items():
        if isinstance(value := section.get(key, 1), int) and value > 1:
            refuse.add(f"parallelism.{key}", value, what)
    shard = section.get("data_parallel_shard_degree", -1)
    reshard = section.get("fsdp_reshard_after_forward", "default")
    stage = 2 if reshard == "never" else 3
    taken = [Taken("parallelism.data_parallel_shard_degree", shard, "engine", Engine.fsdp2, "--engine fsdp2 (fully_shard)",
                   "data_parallel_shard_degree" not in section),
             Taken("parallelism.fsdp_reshard_after_forward", reshard, "stage", stage, f"ZeRO-{stage} equivalent",
                   "fsdp_reshard_after_forward" not in section)]  # fmt: skip
    if isinstance(shard, int) and shard > 0:
        taken.append(Taken("parallelism.data_parallel_shard_degree", shard, "gpus", str(shard), f"--gpus {shard}"))
    return taken


def _checkpointing(section: Mapping, refuse: NotModelled) -> list[Taken]:
    """mode none / full / selective: option "op" is torchtitan's per-op SAC, an integer n checkpoints every n-th layer."""
    mode, option = section.get("mode", "selective"), str(section.get("selective_ac_option", "2"))
    default = "mode" not in section
    if mode == "none":
        return [Taken("activation_checkpoint.mode", mode, "checkpointing", Checkpointing.none, "--checkpointing none", default)]
    if mode == "full":
        return [Taken("activation_checkpoint.mode", mode, "checkpointing", Checkpointing.full, "--checkpointing full", default)]
    if mode == "selective" and option == "op":
        return [Taken("activation_checkpoint.selective_ac_option", option, "checkpointing", Checkpointing.selective_op,
                      "--checkpointing selective-op", default)]
    if mode == "selective" and option.isdigit() and int(option) > 0:
        return [Taken("activation_checkpoint.selective_ac_option", option, "checkpointing", f"every:{option}",
                      f"--checkpointing every:{option} (every {option}th layer fully checkpointed)", "selective_ac_option" not in section)]
    refuse.add("activation_checkpoint.mode", mode, f"activation checkpointing {mode} {option}")
    return []
