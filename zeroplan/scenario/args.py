"""The options that describe one planned run, as typed (numbers still text): what the CLI's commands, a --from file
and the Python API fill, and what `zeroplan.scenario` turns into a Scenario. The defaults are the inputs' own
(memory/setup.py), as the CLI shows them (cli/options.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.hardware.presets import DEFAULT_HARDWARE
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

_SETUP, _PARALLELISM = TrainingSetup(), Parallelism()  # the defaults, as the CLI shows them (cli/options.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioArgs:
    """The options that describe one planned run, as typed on the command line (numbers still text).

    `scenario()` parses the numbers and validates the calculators' inputs from them (zeroplan.validate), so a
    bad value is one SpecError line naming it.
    """

    model: str | None = None
    params: str | None = None
    largest_layer: str | None = None
    gpus: str = str(_PARALLELISM.gpus)
    nodes: str | None = None  # None: the fewest nodes of the hardware's size (memory.setup.spread_gpus)
    hardware: str = DEFAULT_HARDWARE
    precision: Precision = _SETUP.precision
    optimizer: Optimizer = _SETUP.optimizer
    fp32_grad_accum: bool = _SETUP.fp32_grad_accum
    optimizer_impl: OptimizerImpl | None = None  # None: the stack's default (memory.optimizer_step)
    seq_len: str = str(_SETUP.seq_len)
    micro_batch: str = str(_SETUP.micro_batch)
    grad_accum: str = str(_SETUP.grad_accum)
    checkpointing: Checkpointing | str = _SETUP.checkpointing  # str: every:N (memory.setup.parse_checkpointing)
    attention: Attention = _SETUP.attention
    loss: Loss = _SETUP.loss
    post_training: PostTraining = _SETUP.post_training
    teacher: str | None = None  # --post-training kd: the teacher model (memory.teacher)
    compile: bool = _SETUP.compile  # torch.compile of each block (memory.activations.compiled)
    float8: Float8Recipe = _SETUP.float8  # torchao Float8Linear training of the blocks' linears (memory.float8)
    # what the loop keeps between micro-steps (activations.loop); None: litgpt's under --qlora-stack litgpt, else trainer
    training_loop: TrainingLoop | None = None
    offload_optimizer: OffloadDevice = OffloadDevice.none
    offload_param: OffloadDevice = OffloadDevice.none
    reduce_bucket_size: str | None = None
    overlap_comm: bool | None = None
    prefetch_bucket_size: str | None = None
    max_live_parameters: str | None = None
    param_persistence_threshold: str | None = None
    sub_group_size: str | None = None
    hpz_partition_size: str | None = None
    cuda_context_gib: float | None = None
    nccl_gib: float | None = None
    fragmentation: float | None = None
    calibration: str | None = None  # a `zeroplan calibrate --save` file (zeroplan.calibration.file)
    deepspeed_config: str | None = None
    engine: Engine = Engine.deepspeed
    # PyTorch engine settings that size memory (memory.setup.EngineOptions; docs/engines.md)
    reduce_dtype: str | None = None  # FSDP2 MixedPrecisionPolicy.reduce_dtype: fp32 | bf16
    no_sync: bool = False  # FSDP: no reduce-scatter until the last micro-step (Accelerate, HF Trainer, Lightning)
    adapter_wrap: str = "own"  # FSDP1 + LoRA: own units (peft's policy) | block (litgpt / Lightning Fabric)
    float8_all_gather: bool = False  # FSDP2 + --float8 tensorwise: float8 all-gather of the blocks' linear weights
    from_file: str | tuple[str, ...] | list[str] | None = None  # --from FILE, repeatable (a training file, its launcher's); typed options override them
    from_kind: str | None = None  # --from-kind: the file's kind, instead of recognising it by its keys
    # Fine-tuning modes (zeroplan.scenario.finetune): all unset = full training.
    freeze: str | None = None  # comma-separated globs over HF parameter names
    lora_rank: str | None = None
    lora_targets: str | None = None  # comma-separated module names, or all-linear
    lora_dropout: float | None = None
    dora: bool = False
    modules_to_save: str | None = None
    qlora: bool = False
    quant_type: str = "nf4"
    double_quant: bool = False
    quant_storage: str = "uint8"
    load_in_8bit: bool = False
    adapter_config: str | None = None  # a peft adapter_config.json
    optimizer_in_backward: bool = False  # torchtune's optimizer_in_bwd
    adapter_dtype: str = "fp32"  # fp32: peft's autocast_adapter_dtype=True (its default); base: False
    qlora_stack: str = "peft"  # who quantizes a 4-bit base (memory/quant.py QloraStack)
    bnb_version: str = "0.50.2"  # the bitsandbytes release (before 0.43.2 a 4-bit matmul keeps its input)
    # Set by a --from file only (zeroplan.frameworks.tuning), resolved against the model: LoRA on every linear
    # but the head, named one by one, plus these comma-separated names; and a rule for what trains, the rest frozen.
    lora_linear_names: str | None = None
    train_only: object | None = None  # zeroplan.frameworks.tuning.TrainOnly
    lora_target_rule: object | None = None  # zeroplan.frameworks.tuning.LoraRegex: peft's string target_modules
    given: frozenset[str] = frozenset()  # the options typed on the command line, not left at their defaults


# CLI option -> DeepSpeedKnobs field, for the knobs given as element counts.
KNOB_OPTIONS = {
    "reduce_bucket_size": "reduce_bucket_size",
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "max_live_parameters": "stage3_max_live_parameters",
    "param_persistence_threshold": "stage3_param_persistence_threshold",
    "sub_group_size": "sub_group_size",
    "hpz_partition_size": "zero_hpz_partition_size",
}
