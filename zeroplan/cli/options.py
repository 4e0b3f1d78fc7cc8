"""The CLI's option vocabulary: output formats, the option groups the commands share (each declared once, under
its --help panel; cli/groups.py splices them into the commands) and the options one command has to itself."""

from enum import Enum
from typing import Annotated, Optional

import typer

from zeroplan.advise.request import DEFAULT_MODEL
from zeroplan.cli.groups import OUTPUT_PANEL, group, option
from zeroplan.frameworks.kinds import FromKind
from zeroplan.hardware.presets import DEFAULT_HARDWARE
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import (
    AdapterWrap,
    Attention,
    Engine,
    Float8Recipe,
    Loss,
    OffloadDevice,
    Optimizer,
    OptimizerImpl,
    Parallelism,
    PostTraining,
    Precision,
    ReduceDtype,
    TrainingLoop,
    TrainingSetup,
)
from zeroplan.models.mesh import CpComm, Schedule
from zeroplan.units import Unit

# The defaults every command shows are the inputs' own (memory/setup.py), as ScenarioArgs's and the Python
# API's are (zeroplan/scenario/args.py, zeroplan/api/runs.py); counts become text, as typed.
SETUP, PARALLELISM = TrainingSetup(), Parallelism()

# The --help panels; a command's own option names the panel it belongs under.
MODEL_PANEL, INPUTS_PANEL, HARDWARE_PANEL, TRAINING_PANEL = "Model", "Input files", "Hardware", "Training"
FINETUNE_PANEL, ENGINE_PANEL, DEEPSPEED_PANEL = "Fine-tuning", "Engine and offload", "DeepSpeed knobs"
PARALLELISM_PANEL = "Parallelism"


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"
    markdown = "markdown"


class Method(str, Enum):
    zeroplan = "zeroplan"
    deepspeed = "deepspeed"
    megatron = "megatron"


class CheckFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"
    junit = "junit"


CHECKPOINTING_NAMES = "none, selective, selective-op, full or every:N"
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]  # models, hardware


# advise and throughput
ADVISOR_PANEL, SWEEP_PANEL = "Advisor policy", "Global-batch sweep"


class PolicyName(str, Enum):
    article = "article"
    default = "default"


AdviseModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", rich_help_panel=MODEL_PANEL, help=f"Preset name, YAML spec path or HF config.json path (default: {DEFAULT_MODEL}).")]
GlobalBatchOpt = Annotated[str, typer.Option("--global-batch", rich_help_panel=TRAINING_PANEL, help="Sequences per optimizer step over all GPUs (= micro-batch x accumulation x GPUs).")]
PolicyOpt = Annotated[PolicyName, typer.Option("--policy", rich_help_panel=ADVISOR_PANEL, help="article: the source article's tree as written; default: zeroplan's.")]
PolicyFileOpt = Annotated[Optional[str], typer.Option("--policy-file", rich_help_panel=ADVISOR_PANEL, help="YAML mapping of policy thresholds to override (docs/advisor.md).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", rich_help_panel=ADVISOR_PANEL, help="Override one policy threshold, key=value; repeatable, applied after --policy-file.")]
EmitOpt = Annotated[Optional[str], typer.Option("--emit-deepspeed", rich_help_panel=OUTPUT_PANEL, help="Write a DeepSpeed config for the recommendation to this path.")]
EmitAccelerateOpt = Annotated[Optional[str], typer.Option("--emit-accelerate", rich_help_panel=OUTPUT_PANEL, help="Write an Accelerate config (FSDP or DDP) for an --engine fsdp|fsdp2|ddp recommendation to this path.")]
MfuOpt = Annotated[Optional[float], typer.Option("--mfu", rich_help_panel=HARDWARE_PANEL, help="Share of dense peak the compute reaches (default: the hardware preset's).")]
SweepOpt = Annotated[Optional[str], typer.Option("--sweep", rich_help_panel=SWEEP_PANEL, help="Global batches to sweep, comma-separated, or 'auto' (GPUs x 1..512).")]
MaxMicroOpt = Annotated[Optional[str], typer.Option("--max-micro-batch", rich_help_panel=SWEEP_PANEL, help="Sweep: largest micro-batch, accumulation above it (default: the largest ZeRO-3 fits).")]


# Fine-tuning modes (docs/finetune.md); none given = full training.
class QuantType(str, Enum):
    nf4 = "nf4"
    fp4 = "fp4"


class QuantStorageName(str, Enum):
    uint8 = "uint8"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"



# The groups. A command takes them with @takes(...) (cli/groups.py); an option added here reaches every command
# that takes its group, and the option surface test (tests/test_architecture.py) names it deliberately.
MODEL = group(
    MODEL_PANEL,
    option("model", Optional[str], None, "--model", "-m", help="Preset name, YAML spec path or HF config.json path."),
    option("params", Optional[str], None, "--params", help="Bare parameter count, e.g. 9e9, 9B or 1.5T."),
    option("largest_layer", Optional[str], None, "--largest-layer", help="Largest layer's parameters (DeepSpeed's definition); taken from --model when given."),
)
INPUTS = group(
    INPUTS_PANEL,
    option("deepspeed_config", Optional[str], None, "--deepspeed-config", help='ds_config.json: stage, precision, batch, offload and knobs (Hugging Face "auto" resolved); options given here override it.'),
    option("from_file", Optional[list[str]], None, "--from", metavar="FILE", help="A training file (LLaMA-Factory, axolotl, TRL, ms-swift, torchtune, torchtitan, litgpt) and/or its Accelerate launcher config or ds_config.json (read as --deepspeed-config), repeatable: model, GPUs, engine, precision, batch, length and its DeepSpeed config (docs/inputs.md); options given here override them."),
    option("from_kind", Optional[FromKind], None, "--from-kind", help="The --from file's kind, when its keys do not tell."),
)
HARDWARE = group(
    HARDWARE_PANEL,
    option("gpus", str, str(PARALLELISM.gpus), "--gpus", "-g", help="Total GPUs (data-parallel degree)."),
    option("nodes", Optional[str], None, "--nodes", "-n", help="Nodes the GPUs are spread over (default: the fewest of the hardware's size that hold them)."),
    option("hardware", str, DEFAULT_HARDWARE, "--hardware", help="Hardware preset or YAML path; 'none' for no fit verdict."),
)
PROFILE = group(
    HARDWARE_PANEL,
    option("cuda_context_gib", Optional[float], None, help="Override the hardware profile's value, GiB."),
    option("nccl_gib", Optional[float], None, help="Override the hardware profile's value, GiB."),
    option("fragmentation", Optional[float], None, "--fragmentation", help="Allocator fragmentation margin, fraction of the allocated peak."),
)
CALIBRATION = group(
    HARDWARE_PANEL,
    option("calibration", Optional[str], None, "--calibration", help="A `zeroplan calibrate --save` file: its allocator overhead, CUDA context and residual refine the hardware profile's (docs/calibrate.md)."),
)
NETWORK = group(
    HARDWARE_PANEL,
    option("topology", Optional[Topology], None, "--topology", help="How the GPUs talk (default: the hardware's fabric; multinode past one node)."),
)
TRAINING = group(
    TRAINING_PANEL,
    option("precision", Precision, SETUP.precision, "--precision", help="Byte recipe precision."),
    option("optimizer", Optimizer, SETUP.optimizer, "--optimizer", help="Optimizer (sets the optimizer-state bytes)."),
    option("fp32_grad_accum", bool, SETUP.fp32_grad_accum, "--fp32-grad-accum", help="Accumulate gradients in fp32 (+4 B/param)."),
    option("optimizer_impl", Optional[OptimizerImpl], None, "--optimizer-impl", help="AdamW's step: foreach (PyTorch's default: one temporary of a state over the whole group), fused (none; DeepSpeed's default FusedAdam, CPUAdam when offloaded) or for-loop (two of the largest tensor's); docs/engines.md."),
    option("seq_len", str, str(SETUP.seq_len), "--seq-len", help="Tokens per sequence."),
    option("micro_batch", str, str(SETUP.micro_batch), "--micro-batch", help="Sequences per GPU per micro-step."),
    option("grad_accum", str, str(SETUP.grad_accum), "--grad-accum", help="Micro-steps per optimizer step."),
    option("checkpointing", str, SETUP.checkpointing.value, "--checkpointing", help=f"Activation checkpointing: {CHECKPOINTING_NAMES} (docs/activations.md): selective is Korthikanti's attention-core recompute, selective-op torchtitan's per-op policy, full every layer (HF gradient_checkpointing), every:N full on every N-th layer (torchtitan selective_ac_option=N)."),
    option("attention", Attention, SETUP.attention, "--attention", help="eager keeps score matrices; flash (SDPA) does not."),
    option("post_training", PostTraining, SETUP.post_training, "--post-training", help="What the step trains on: sft; preference pairs (chosen + rejected rows, 2 x --micro-batch sequences forwarded): dpo (TRL DPOTrainer: a frozen reference model, or under peft the adapter-disabled base, forwarded after the policy), orpo or simpo (no reference model); kto (TRL KTOTrainer: unpaired rows and their KL batch, a reference model); asft (LLaMA-Factory use_asft_loss: a reference model forwarded before the policy); kd (TRL GKDTrainer off-policy: the --teacher model's logits)."),
    option("teacher", Optional[str], None, "--teacher", help="--post-training kd: the teacher model (preset name, YAML spec, HF config.json or Hub id), frozen, 16-bit, sharing the student's vocabulary."),
    option("loss", Loss, SETUP.loss, "--loss", help="Cross-entropy: hf (fp32 upcast, transformers' default), hf-shift (transformers 4.46-4.48: also a shifted fp32 copy), hf-legacy (before 4.46: fp32 logits from the model, then the shifted copy), no-upcast (16-bit logits), chunked (torchtune CEWithChunkedOutputLoss), liger (LigerFusedLinearCrossEntropyLoss)."),
)
FINETUNE = group(
    FINETUNE_PANEL,
    option("freeze", Optional[str], None, "--freeze", help="Freeze parameters matching these comma-separated globs over Hugging Face names, e.g. 'model.embed_tokens.*,model.layers.0.*'."),
    option("lora_rank", Optional[str], None, "--lora-rank", help="Train LoRA adapters of rank R on a frozen base."),
    option("lora_targets", Optional[str], None, "--lora-targets", help="Linears given adapters: comma-separated names (q_proj,v_proj) or all-linear (default: peft's, q_proj,v_proj)."),
    option("lora_dropout", Optional[float], None, "--lora-dropout", help="lora_dropout (0: peft uses no dropout module)."),
    option("dora", bool, False, "--dora", help="DoRA: LoRA plus a trainable magnitude vector per adapted linear."),
    option("modules_to_save", Optional[str], None, "--modules-to-save", help="Modules trained in full beside the adapters (peft modules_to_save), comma-separated."),
    option("qlora", bool, False, "--qlora", help="QLoRA: the frozen base linears in bitsandbytes 4-bit."),
    option("quant_type", QuantType, QuantType.nf4, "--quant-type", help="--qlora: bnb_4bit_quant_type."),
    option("double_quant", bool, False, "--double-quant", help="--qlora: bnb_4bit_use_double_quant (absmax quantized to 8 bits)."),
    option("quant_storage", QuantStorageName, QuantStorageName.uint8, "--quant-storage", help="--qlora: bnb_4bit_quant_storage (ZeRO-3 and FSDP need the compute dtype)."),
    option("load_in_8bit", bool, False, "--load-in-8bit", help="The frozen base linears in bitsandbytes LLM.int8 (with --lora-rank)."),
    option("adapter_config", Optional[str], None, "--adapter-config", help="A peft adapter_config.json as the LoRA spec (r, target_modules, lora_dropout, use_dora, modules_to_save)."),
    option("optimizer_in_backward", bool, False, "--optimizer-in-backward", help="The optimizer steps each parameter in backward and frees its gradient (torchtune optimizer_in_bwd; one GPU or --engine fsdp2)."),
    option("adapter_dtype", str, "fp32", "--adapter-dtype", help="LoRA adapters' dtype on a 16-bit base: fp32 (peft get_peft_model autocast_adapter_dtype=True, its default) or base (autocast_adapter_dtype=False)."),
    option("qlora_stack", str, "peft", "--qlora-stack", help="Who quantizes a 4-bit base: peft (transformers + prepare_model_for_kbit_training, its fp32 cast kept), trl (SFTTrainer), axolotl, llamafactory, litgpt (--quantize bnb.nf4, the head too) or torchtune (torchao NF4)."),
    option("bnb_version", str, "0.50.2", "--bnb-version", help="The bitsandbytes release: before 0.43.2 each 4-bit matmul keeps its input for the backward."),
)
ENGINE = group(
    ENGINE_PANEL,
    option("engine", Engine, Engine.deepspeed, "--engine", help="deepspeed, fsdp (FSDP1), fsdp2 (fully_shard) or ddp; the ZeRO stage maps to each engine's own terms."),
    option("stage", Optional[int], None, "--stage", "-s", min=0, max=3, help="Only this ZeRO stage (default: all four)."),
)
# PyTorch engine settings that size memory (memory.setup.EngineOptions, docs/engines.md); estimate takes them.
ENGINE_SETTINGS = group(
    ENGINE_PANEL,
    option("reduce_dtype", Optional[ReduceDtype], None, "--reduce-dtype", help="--engine fsdp2: MixedPrecisionPolicy(reduce_dtype=...): the reduce-scatter in fp32 (torchtitan's default) or bf16 (default: the param dtype)."),
    option("no_sync", bool, False, "--no-sync", help="FSDP with --grad-accum: no reduce-scatter until the last micro-step, whole gradients kept until then (Accelerate, HF Trainer and Lightning do this unless sync_each_batch)."),
    option("float8_all_gather", bool, False, "--float8-all-gather", help="--engine fsdp2 with --float8 tensorwise: the blocks' linear weights all-gathered in float8, 1 byte each (torchao enable_fsdp_float8_all_gather; torchtitan's [float8] key of that name)."),
    option("adapter_wrap", AdapterWrap, AdapterWrap.own, "--adapter-wrap", help="--engine fsdp with LoRA: adapters in FSDP units of their own (peft's policy) or in their block's flat parameter (litgpt, Lightning Fabric; use_orig_params=True)."),
)
# How the blocks run (memory.activations.compiled; docs/activations.md "torch.compile"); estimate takes it.
BLOCK_SETTINGS = group(
    TRAINING_PANEL,
    option("compile", bool, SETUP.compile, "--compile", help="torch.compile of each block (inductor; torchtitan, torchtune): the saved tensors AOTAutograd's partitioner keeps, measured on CPU for Llama-style dense models, also under --checkpointing full / every:N / selective-op."),
    option("float8", Float8Recipe, SETUP.float8, "--float8", help="torchao Float8Linear training of the blocks' linears (torchtitan's float8 converter; the head stays bf16): the casts' transients per recipe, measured on CPU (docs/float8.md)."),
    option("training_loop", Optional[TrainingLoop], None, "--training-loop", help="Whose loop runs the micro-steps: trainer (HF Trainer, Accelerate, TRL, torchtune, torchtitan: nothing kept between them) or litgpt (Lightning Fabric: fp32 logits, the previous micro-step's logits and graph alive until the next forward returns). Default: litgpt under --qlora --qlora-stack litgpt, else trainer."),
)
OFFLOAD = group(
    ENGINE_PANEL,
    option("offload_optimizer", OffloadDevice, OffloadDevice.none, "--offload-optimizer", help="Optimizer offload (ZeRO-1/2: cpu; ZeRO-3: cpu or nvme)."),
    option("offload_param", OffloadDevice, OffloadDevice.none, "--offload-param", help="Parameter offload (ZeRO-3 only)."),
)
DEEPSPEED = group(
    DEEPSPEED_PANEL,
    option("reduce_bucket_size", Optional[str], None, help="DeepSpeed zero_optimization knob (elements); DeepSpeed's default when not given."),
    option("overlap_comm", Optional[bool], None, "--overlap-comm/--no-overlap-comm", help="DeepSpeed overlap_comm (default: on for stage 3 only)."),
    option("prefetch_bucket_size", Optional[str], None, help="DeepSpeed zero_optimization knob (elements); DeepSpeed's default when not given."),
    option("max_live_parameters", Optional[str], None, help="DeepSpeed zero_optimization knob (elements); DeepSpeed's default when not given."),
    option("param_persistence_threshold", Optional[str], None, help="DeepSpeed zero_optimization knob (elements); DeepSpeed's default when not given."),
    option("sub_group_size", Optional[str], None, help="DeepSpeed zero_optimization knob (elements); DeepSpeed's default when not given."),
    option("hpz_partition_size", Optional[str], None, help="DeepSpeed zero_optimization knob (elements); DeepSpeed's default when not given."),
)
MESH = group(
    PARALLELISM_PANEL,
    option("tp", Optional[str], None, "--tp", help="Tensor-parallel degree (--method megatron)."),
    option("pp", Optional[str], None, "--pp", help="Pipeline stages (--method megatron)."),
    option("cp", Optional[str], None, "--cp", help="Context-parallel degree (--method megatron)."),
    option("cp_comm", CpComm, CpComm.p2p, "--cp-comm", help="How --cp moves the sequence: p2p, ring attention's K/V exchange; a2a, DeepSpeed-Ulysses' all-to-alls (a ds_config's sequence_parallel_size; docs/parallelism.md)."),
    option("ep", Optional[str], None, "--ep", help="Expert-parallel degree, MoE (--method megatron)."),
    option("vpp", Optional[str], None, "--vpp", help="Model chunks (virtual stages) per pipeline rank, for the interleaved schedules (docs/parallelism.md)."),
    option("pp_first_layers", Optional[str], None, "--pp-first-layers", help="Layers of the first pipeline stage (Megatron-LM's --decoder-first-pipeline-num-layers; docs/parallelism.md)."),
    option("pp_last_layers", Optional[str], None, "--pp-last-layers", help="Layers of the last pipeline stage (Megatron-LM's --decoder-last-pipeline-num-layers)."),
    option("pp_schedule", Optional[Schedule], None, "--pp-schedule", help="Pipeline schedule with --pp (docs/parallelism.md); default 1f1b."),
    option("sequence_parallel", bool, False, "--sequence-parallel", help="Megatron's sequence parallelism with --tp (--method megatron)."),
)
OUTPUT = group(
    OUTPUT_PANEL,
    option("units", Unit, Unit.gib, "--units", help="Display unit: gib (2^30) or gb (1e9)."),
    option("fmt", Format, Format.table, "--format", "-f", help="Output format."),
    option("html", Optional[str], None, "--html", help="Also write a self-contained HTML report (inline SVG and CSS, nothing fetched) to this path; --force replaces an existing file."),
    option("force", bool, False, "--force", help="Let the files this command writes (--html, --output, --emit-*) replace existing ones."),
)
