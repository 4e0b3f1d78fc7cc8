"""An Accelerate config YAML (`accelerate config` writes one): the engine, GPUs, nodes, precision and DeepSpeed.

Keys as accelerate's ClusterConfig and its DeepSpeed/FSDP plugins read them
(huggingface/accelerate@16cb6eb:src/accelerate/commands/config/config_args.py, src/accelerate/utils/dataclasses.py): `distributed_type` DEEPSPEED (a `deepspeed_config_file`, or the inline
keys from which DeepSpeedPlugin builds a config), FSDP (`fsdp_config`, FSDP1 or FSDP2) or MULTI_GPU (DDP);
`num_processes` (all GPUs), `num_machines`, `mixed_precision` (fp8: `fp8_config.backend` AO is torchao's Float8Linear,
read as accelerate==1.16.0 runs it: utils/ao.py, utils/dataclasses.py AORecipeKwargs; TE and MS-AMP refused). Docs: https://huggingface.co/docs/accelerate/
package_reference/cli#accelerate-config. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import (
    FileKeys,
    FrameworkRun,
    NotModelled,
    Taken,
    validate_keys,
)
from zeroplan.memory.setup import Checkpointing, Engine, Float8Recipe, OffloadDevice, Precision

Device = Literal["none", "cpu", "nvme"]
ACCELERATE_ZERO_STAGE = 2  # DeepSpeedPlugin's default (ACCELERATE_DEEPSPEED_ZERO_STAGE unset)
MIXED_PRECISION = {"no": Precision.fp32, "fp16": Precision.fp16_mixed, "bf16": Precision.bf16_mixed}
# DeepSpeedPlugin._deepspeed_config_checks: beside deepspeed_config_file, accelerate refuses these (and mixed_precision).
PLUGIN_KEYS = ("gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
               "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path",
               "zero3_save_16bit_model")  # fmt: skip


class DeepSpeedSection(FileKeys):
    deepspeed_config_file: str | None = None
    zero_stage: Literal[0, 1, 2, 3] | None = None
    offload_optimizer_device: Device | None = None
    offload_param_device: Device | None = None
    gradient_accumulation_steps: Annotated[int, Field(ge=1)] | None = None
    zero3_init_flag: bool | None = None


class ParallelismSection(FileKeys):
    parallelism_config_dp_replicate_size: Annotated[int, Field(ge=1)] = 1
    parallelism_config_dp_shard_size: Annotated[int, Field(ge=1)] = 1
    parallelism_config_tp_size: Annotated[int, Field(ge=1)] = 1
    parallelism_config_cp_size: Annotated[int, Field(ge=1)] = 1
    parallelism_config_sp_size: Annotated[int, Field(ge=1)] = 1


class AccelerateKeys(FileKeys):
    distributed_type: str
    num_processes: Annotated[int, Field(ge=1)] | Literal[-1] | None = None  # -1: the launcher's count
    num_machines: Annotated[int, Field(ge=1)] | None = None
    mixed_precision: Literal["no", "fp16", "bf16", "fp8"] | None = None
    use_cpu: bool = False
    deepspeed_config: dict[str, Any] | None = None
    fsdp_config: dict[str, Any] | None = None
    parallelism_config: dict[str, Any] | None = None
    fp8_config: dict[str, Any] | None = None


def read_accelerate(data: Mapping, origin: str) -> FrameworkRun:
    """The run an Accelerate config describes; SpecError for what it asks that zeroplan does not model."""
    keys = validate_keys(AccelerateKeys, data, origin)
    refuse = NotModelled(origin)
    taken = _processes(keys) + _engine(keys, origin, refuse)
    if keys.use_cpu:
        refuse.add("use_cpu", True, "training on CPU")
    if keys.mixed_precision == "fp8":
        taken += _fp8(keys, taken, refuse)
    elif keys.mixed_precision is not None:
        precision = MIXED_PRECISION[keys.mixed_precision]
        taken.append(Taken("mixed_precision", keys.mixed_precision, "precision", precision, f"--precision {precision.value}"))
    elif not _config_file(keys):  # ClusterConfig.mixed_precision defaults to "no": fp32, unless the script says otherwise
        taken.append(Taken("mixed_precision", "no", "precision", Precision.fp32, "--precision fp32 (Accelerate launches "
                           "without mixed precision unless the training script asks for it; a training file's bf16 "
                           "given with another --from overrides it)", True))
    if keys.parallelism_config:
        taken += _parallelism(validate_keys(ParallelismSection, keys.parallelism_config, origin, "parallelism_config"),
                              refuse, keys.distributed_type)
    refuse.raise_any()
    return FrameworkRun(FromKind.accelerate, origin, tuple(taken))


def _fp8(keys: AccelerateKeys, taken: list[Taken], refuse: NotModelled) -> list[Taken]:
    """mixed_precision fp8 with torchao (backend AO, or none named: the Accelerator picks torchao first when it is
    installed, accelerator.py fp8_backend NO): bf16 autocast around Float8Linear() (tensorwise) on every linear but the
    model's first and last (utils/ao.py convert_model_to_fp8_ao), float8 all-gather under FSDP2 unless
    fp8_config.enable_fsdp_float8_all_gather is false (AORecipeKwargs' default true)."""
    config = keys.fp8_config or {}
    backend = str(config.get("backend", "AO")).upper()
    if backend != "AO":
        refuse.add("fp8_config.backend", backend, "FP8 training with TransformerEngine or MS-AMP (torchao's "
                   "Float8Linear, backend AO, is modelled)")
        return []
    engine = next((t.value for t in taken if t.option == "engine"), None)
    if engine in (Engine.deepspeed, Engine.fsdp, Engine.fsdp.value, Engine.deepspeed.value):
        refuse.add("mixed_precision", "fp8", f"torchao float8 training under {Engine(engine).value} (modelled under "
                   "FSDP2, DDP and one GPU)")
        return []
    out = [Taken("mixed_precision", "fp8", "precision", Precision.bf16_mixed, "--precision bf16-mixed (fp8 autocasts "
                 "to bf16 around the float8 matmuls)"),
           Taken("fp8_config.backend", backend, "float8", Float8Recipe.tensorwise, "--float8 tensorwise (torchao "
                 "Float8LinearConfig(); the first and last linear stay bf16)", "backend" not in config)]
    if engine in (Engine.fsdp2, Engine.fsdp2.value):
        gather = bool(config.get("enable_fsdp_float8_all_gather", True))
        out.append(Taken("fp8_config.enable_fsdp_float8_all_gather", gather, "float8_all_gather", gather,
                         "--float8-all-gather" if gather else "weights all-gathered in bf16",
                         "enable_fsdp_float8_all_gather" not in config))
    return out


def _config_file(keys: AccelerateKeys) -> bool:
    return keys.distributed_type == "DEEPSPEED" and bool((keys.deepspeed_config or {}).get("deepspeed_config_file"))


def _processes(keys: AccelerateKeys) -> list[Taken]:
    taken = []
    if keys.distributed_type == "NO" and keys.num_processes is None:  # one process: accelerate launch runs it on 1 GPU
        taken.append(Taken("num_processes", 1, "gpus", "1", "--gpus 1 (distributed_type NO: one process)", True))
    if keys.num_processes is not None and keys.num_processes > 0:
        taken.append(Taken("num_processes", keys.num_processes, "gpus", str(keys.num_processes), f"--gpus {keys.num_processes}"))
    if keys.num_machines is not None:
        taken.append(Taken("num_machines", keys.num_machines, "nodes", str(keys.num_machines), f"--nodes {keys.num_machines}"))
    return taken


def _engine(keys: AccelerateKeys, origin: str, refuse: NotModelled) -> list[Taken]:
    kind = keys.distributed_type
    if kind == "DEEPSPEED":
        section = validate_keys(DeepSpeedSection, keys.deepspeed_config or {}, origin, "deepspeed_config")
        return [Taken("distributed_type", kind, "engine", Engine.deepspeed, "--engine deepspeed"),
                *_deepspeed(section, keys, origin)]  # fmt: skip
    if kind == "FSDP":
        fsdp = fsdp_taken(keys.fsdp_config or {}, "fsdp_config", origin, refuse)  # its first: the engine, by version
        return [Taken("distributed_type", kind, "engine", fsdp[0].value, "FSDP"), *fsdp]
    if kind == "MULTI_GPU":
        return [Taken("distributed_type", kind, "engine", Engine.ddp, "--engine ddp"),
                Taken("distributed_type", kind, "stage", 0, "stage 0 (DDP)")]  # fmt: skip
    if kind == "NO":  # one process, no wrapper
        return [Taken("distributed_type", kind, "engine", Engine.none, "--engine none"),
                Taken("distributed_type", kind, "stage", 0, "stage 0 (no wrapper)")]  # fmt: skip
    refuse.add("distributed_type", kind, "zeroplan models DEEPSPEED, FSDP, MULTI_GPU (DDP) and NO (one GPU)")
    return []


def _deepspeed(section: DeepSpeedSection, keys: AccelerateKeys, origin: str) -> list[Taken]:
    """The config file, or the inline keys as the config DeepSpeedPlugin builds from them (batch sizes "auto")."""
    raw = keys.deepspeed_config or {}
    if section.deepspeed_config_file is not None:
        clashing = [f"deepspeed_config.{k}" for k in PLUGIN_KEYS if k in raw] + (["mixed_precision"] if keys.mixed_precision else [])
        if clashing:
            raise SpecError(f"{origin}: {', '.join(clashing)}: Accelerate refuses these beside "
                            "deepspeed_config.deepspeed_config_file; set them in the DeepSpeed config")  # fmt: skip
        file = section.deepspeed_config_file
        return [Taken("deepspeed_config.deepspeed_config_file", file, "deepspeed_config", file, "--deepspeed-config"),
                *_init_flag(section)]  # fmt: skip
    stage = section.zero_stage if section.zero_stage is not None else ACCELERATE_ZERO_STAGE
    optimizer_device = OffloadDevice(section.offload_optimizer_device or "none")
    param_device = OffloadDevice(section.offload_param_device or "none")
    block = {
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": section.gradient_accumulation_steps or "auto",
        "zero_optimization": {"stage": stage, "offload_optimizer": {"device": optimizer_device.value},
                              "offload_param": {"device": param_device.value}},
        **_precision_sections(keys.mixed_precision),
    }  # fmt: skip
    taken = [Taken("deepspeed_config.zero_stage", stage, None, None, f"ZeRO-{stage}", section.zero_stage is None)]
    for key, option, device in (("offload_optimizer_device", "offload_optimizer", optimizer_device),
                                ("offload_param_device", "offload_param", param_device)):  # fmt: skip
        if key in raw:
            taken.append(Taken(f"deepspeed_config.{key}", device.value, option, device, f"--{option.replace('_', '-')} {device.value}"))
    if section.gradient_accumulation_steps is not None:
        gas = section.gradient_accumulation_steps
        taken.append(Taken("deepspeed_config.gradient_accumulation_steps", gas, "grad_accum", str(gas), f"--grad-accum {gas}"))
    means = "an inline DeepSpeed config, as Accelerate's DeepSpeedPlugin builds it from these keys (batch sizes \"auto\")"
    return [*taken, *_init_flag(section), Taken("deepspeed_config", "(inline keys)", "deepspeed_config", block, means)]


def _precision_sections(mixed_precision: str | None) -> dict[str, dict]:
    """DeepSpeedPlugin.set_mixed_precision; without mixed_precision the script's precision decides ("auto")."""
    if mixed_precision is None:
        return {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}
    return {"fp16": {"enabled": mixed_precision == "fp16"}, "bf16": {"enabled": mixed_precision == "bf16"}}


def _init_flag(section: DeepSpeedSection) -> list[Taken]:
    if section.zero3_init_flag is None:
        return []
    means = "noted only: zero.Init changes how the model loads, not the training step zeroplan sizes"
    return [Taken("deepspeed_config.zero3_init_flag", section.zero3_init_flag, None, None, means)]


def _parallelism(section: ParallelismSection, refuse: NotModelled, distributed_type: str | None) -> list[Taken]:
    """tp_size: a tensor-parallel mesh (the `tp` of FrameworkRun, read by the scenario: Accelerate's ParallelismConfig
    applies the model's Hugging Face tp_plan on a (dp_shard, tp) DeviceMesh under FSDP2; src/accelerate/
    parallelism_config.py). sp_size under DEEPSPEED is ALST/Ulysses (sp_backend's only value, "deepspeed": Accelerator._prepare_deepspeed calls
    UlyssesSPAttentionHF.register_with_transformers(sequence_parallel_size=sp_size); huggingface/accelerate@16cb6eb:
    src/accelerate/accelerator.py): the `cp` of FrameworkRun, read as --cp N --cp-comm a2a. cp_size (torch's ring
    context parallelism under FSDP2), sp_size elsewhere and hybrid sharding are refused."""
    prefix = "parallelism_config.parallelism_config_"
    found = []
    for name, what in (("cp_size", "context parallelism"), ("sp_size", "sequence parallelism")):
        if (value := getattr(section, f"parallelism_config_{name}")) > 1:
            if name == "sp_size" and distributed_type == "DEEPSPEED":
                found.append(Taken(prefix + name, value, "cp", value, f"--cp {value} --cp-comm a2a: DeepSpeed's "
                                   "ALST/Ulysses sequence parallelism (sp_backend deepspeed)"))
            else:
                refuse.add(prefix + name, value, what)
    if section.parallelism_config_dp_replicate_size > 1 and section.parallelism_config_dp_shard_size > 1:
        refuse.add(prefix + "dp_replicate_size", section.parallelism_config_dp_replicate_size, "hybrid sharding (HSDP)")
    tp = section.parallelism_config_tp_size
    if tp == 1:
        return found
    if distributed_type != "FSDP":  # ParallelismConfig runs with FSDP2 or plain multi-GPU; the latter (DDP) is refused
        refuse.add(prefix + "tp_size", tp, "tensor parallelism")
        return found
    return found + [Taken(prefix + "tp_size", tp, "tp", tp, f"--tp {tp}: the model's Hugging Face tp_plan on a (dp_shard, tp) "
                  "mesh (token embedding whole, logits gathered)")]


# --- FSDP: Accelerate's fsdp_config, and axolotl's (whose keys may drop the fsdp_ prefix) ----------------------

FSDP1_STAGES = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}  # docs/engines.md
FSDP1_BY_NUMBER = {1: "FULL_SHARD", 2: "SHARD_GRAD_OP", 3: "NO_SHARD", 4: "HYBRID_SHARD", 5: "_HYBRID_SHARD_ZERO2"}


class FsdpSection(FileKeys):
    version: Literal[1, 2] = 1
    sharding_strategy: str | int | None = None
    reshard_after_forward: bool | str | None = None
    offload_params: bool = False
    activation_checkpointing: bool = False


def fsdp_taken(raw: Mapping, prefix: str, origin: str, refuse: NotModelled, version: int | None = None) -> list[Taken]:
    """Engine, stage and checkpointing from an FSDP section; `version` from outside it (axolotl's fsdp_version)."""
    written = {key.removeprefix("fsdp_"): key for key in raw}
    section = validate_keys(FsdpSection, {key.removeprefix("fsdp_"): value for key, value in raw.items()}, origin, prefix)
    outside = version is not None and "version" not in written  # axolotl's top-level fsdp_version
    version = version or section.version
    engine = Engine.fsdp if version == 1 else Engine.fsdp2
    key = "fsdp_version" if outside else f"{prefix}.{written.get('version', 'fsdp_version')}"
    taken = [Taken(key, version, "engine", engine, f"--engine {engine.value}", not outside and "version" not in written)]
    strategy_key, value, strategy = _strategy(section, version)
    shown_key = f"{prefix}.{written.get(strategy_key, 'fsdp_' + strategy_key)}"
    stage = FSDP1_STAGES.get(strategy)
    if stage is None or (version == 2 and stage == 0):
        refuse.add(shown_key, value, "hybrid sharding" if "HYBRID" in strategy else f"sharding strategy {strategy}")
    else:
        words = f"{strategy} (ZeRO-{stage} equivalent)" if version == 1 else f"reshard_after_forward={stage == 3} (ZeRO-{stage} equivalent)"
        taken.append(Taken(shown_key, value, "stage", stage, words, strategy_key not in written))
    if section.offload_params:  # CPUOffload(offload_params=True): parameters, gradients and optimizer states
        key = f"{prefix}.{written['offload_params']}"
        taken += [Taken(key, True, "offload_param", OffloadDevice.cpu, "--offload-param cpu (FSDP CPU offload)"),
                  Taken(key, True, "offload_optimizer", OffloadDevice.cpu, "--offload-optimizer cpu (the optimizer "
                        "steps over the CPU shards)")]
    if section.activation_checkpointing:
        taken.append(Taken(f"{prefix}.{written['activation_checkpointing']}", True, "checkpointing", Checkpointing.full,
                           "--checkpointing full"))  # fmt: skip
    return taken


def _strategy(section: FsdpSection, version: int) -> tuple[str, object, str]:
    """(the key it comes from, its value, the FSDP1 ShardingStrategy name it means); FULL_SHARD by default.

    As FullyShardedDataParallelPlugin reads them: a strategy by name or number, or reshard_after_forward (a bool,
    FSDP2's spelling, or for FSDP1 a strategy name)."""
    if (value := section.sharding_strategy) is not None:
        return "sharding_strategy", value, FSDP1_BY_NUMBER.get(value, str(value)) if isinstance(value, int) else value.upper()
    value = reshard = section.reshard_after_forward
    if isinstance(reshard, str) and reshard.lower() in ("true", "false"):
        reshard = reshard.lower() == "true"
    if isinstance(reshard, bool):
        return "reshard_after_forward", value, "FULL_SHARD" if reshard else "SHARD_GRAD_OP"
    if isinstance(reshard, str):
        return "reshard_after_forward", value, reshard.upper()
    key = "sharding_strategy" if version == 1 else "reshard_after_forward"
    return key, "FULL_SHARD" if version == 1 else True, "FULL_SHARD"
