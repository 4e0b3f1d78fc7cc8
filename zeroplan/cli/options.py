"""The CLI's option vocabulary: output formats and the typer options the commands share."""

from enum import Enum
from typing import Annotated, Optional

import typer

from zeroplan.advise.request import DEFAULT_MODEL
from zeroplan.frameworks.kinds import FromKind
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import (
    Attention,
    Engine,
    Loss,
    OffloadDevice,
    Optimizer,
    Parallelism,
    Precision,
    TrainingSetup,
)
from zeroplan.models.mesh import CpComm, Schedule
from zeroplan.units import Unit

# The defaults every command shows are the inputs' own (memory/setup.py), as ScenarioArgs's and the Python
# API's are (zeroplan/scenario/args.py, zeroplan/api/runs.py); counts become text, as typed.
SETUP, PARALLELISM = TrainingSetup(), Parallelism()


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


ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="Preset name, YAML spec path or HF config.json path.")]
ParamsOpt = Annotated[Optional[str], typer.Option("--params", help="Bare parameter count, e.g. 9e9, 9B or 1.5T.")]
LargestOpt = Annotated[Optional[str], typer.Option("--largest-layer", help="Largest layer's parameters (DeepSpeed's definition); taken from --model when given.")]
GpusOpt = Annotated[str, typer.Option("--gpus", "-g", help="Total GPUs (data-parallel degree).")]
NodesOpt = Annotated[Optional[str], typer.Option("--nodes", "-n", help="Nodes the GPUs are spread over (default: the fewest of the hardware's size that hold them).")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help="Hardware preset or YAML path; 'none' for no fit verdict.")]
StageOpt = Annotated[Optional[int], typer.Option("--stage", "-s", min=0, max=3, help="Only this ZeRO stage (default: all four).")]
PrecisionOpt = Annotated[Precision, typer.Option("--precision", help="Byte recipe precision.")]
OptimizerOpt = Annotated[Optimizer, typer.Option("--optimizer", help="Optimizer (sets the optimizer-state bytes).")]
Fp32AccumOpt = Annotated[bool, typer.Option("--fp32-grad-accum", help="Accumulate gradients in fp32 (+4 B/param).")]
SeqLenOpt = Annotated[str, typer.Option("--seq-len", help="Tokens per sequence.")]
MicroBatchOpt = Annotated[str, typer.Option("--micro-batch", help="Sequences per GPU per micro-step.")]
GradAccumOpt = Annotated[str, typer.Option("--grad-accum", help="Micro-steps per optimizer step.")]
CHECKPOINTING_NAMES = "none, selective, selective-op, full or every:N"
CheckpointingOpt = Annotated[str, typer.Option("--checkpointing", help=f"Activation checkpointing: {CHECKPOINTING_NAMES} (docs/activations.md): selective is Korthikanti's attention-core recompute, selective-op torchtitan's per-op policy, full every layer (HF gradient_checkpointing), every:N full on every N-th layer (torchtitan selective_ac_option=N).")]
LossOpt = Annotated[Loss, typer.Option("--loss", help="Cross-entropy: hf (fp32 upcast, transformers' default), no-upcast (16-bit logits), chunked (torchtune CEWithChunkedOutputLoss), liger (LigerFusedLinearCrossEntropyLoss).")]
AttentionOpt = Annotated[Attention, typer.Option("--attention", help="eager keeps score matrices; flash (SDPA) does not.")]
OffloadOptOpt = Annotated[OffloadDevice, typer.Option("--offload-optimizer", help="Optimizer offload (ZeRO-1/2: cpu; ZeRO-3: cpu or nvme).")]
OffloadParamOpt = Annotated[OffloadDevice, typer.Option("--offload-param", help="Parameter offload (ZeRO-3 only).")]
KnobOpt = Annotated[Optional[str], typer.Option(help="DeepSpeed zero_optimization knob (elements); DeepSpeed's default when not given.")]
OverlapOpt = Annotated[Optional[bool], typer.Option("--overlap-comm/--no-overlap-comm", help="DeepSpeed overlap_comm (default: on for stage 3 only).")]
GibOpt = Annotated[Optional[float], typer.Option(help="Override the hardware profile's value, GiB.")]
FragOpt = Annotated[Optional[float], typer.Option("--fragmentation", help="Allocator fragmentation margin, fraction of the allocated peak.")]
TpOpt = Annotated[Optional[str], typer.Option("--tp", help="Tensor-parallel degree (--method megatron).")]
PpOpt = Annotated[Optional[str], typer.Option("--pp", help="Pipeline stages (--method megatron).")]
CpOpt = Annotated[Optional[str], typer.Option("--cp", help="Context-parallel degree (--method megatron).")]
CpCommOpt = Annotated[CpComm, typer.Option("--cp-comm", help="How --cp moves the sequence: p2p, ring attention's K/V exchange; a2a, DeepSpeed-Ulysses' all-to-alls (a ds_config's sequence_parallel_size; docs/parallelism.md).")]
EpOpt = Annotated[Optional[str], typer.Option("--ep", help="Expert-parallel degree, MoE (--method megatron).")]
VppOpt = Annotated[Optional[str], typer.Option("--vpp", help="Model chunks (virtual stages) per pipeline rank, for the interleaved schedules (docs/parallelism.md).")]
PpFirstOpt = Annotated[Optional[str], typer.Option("--pp-first-layers", help="Layers of the first pipeline stage (Megatron-LM's --decoder-first-pipeline-num-layers; docs/parallelism.md).")]
PpLastOpt = Annotated[Optional[str], typer.Option("--pp-last-layers", help="Layers of the last pipeline stage (Megatron-LM's --decoder-last-pipeline-num-layers).")]
PpScheduleOpt = Annotated[Optional[Schedule], typer.Option("--pp-schedule", help="Pipeline schedule with --pp (docs/parallelism.md); default 1f1b.")]
SeqParallelOpt = Annotated[bool, typer.Option("--sequence-parallel", help="Megatron's sequence parallelism with --tp (--method megatron).")]
UnitsOpt = Annotated[Unit, typer.Option("--units", help="Display unit: gib (2^30) or gb (1e9).")]
EngineOpt = Annotated[Engine, typer.Option("--engine", help="deepspeed, fsdp (FSDP1), fsdp2 (fully_shard) or ddp; the ZeRO stage maps to each engine's own terms.")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
HtmlOpt = Annotated[Optional[str], typer.Option("--html", help="Also write a self-contained HTML report (inline SVG and CSS, nothing fetched) to this path; --force replaces an existing file.")]


FromOpt = Annotated[Optional[str], typer.Option("--from", help="An Accelerate config, or a LLaMA-Factory or axolotl training YAML: model, GPUs, engine, precision, batch, length and its DeepSpeed config (docs/inputs.md); options given here override it.")]
FromKindOpt = Annotated[Optional[FromKind], typer.Option("--from-kind", help="The --from file's kind, when its keys do not tell.")]
DsConfigOpt = Annotated[Optional[str], typer.Option("--deepspeed-config", help='ds_config.json: stage, precision, batch, offload and knobs (Hugging Face "auto" resolved); options given here override it.')]


# advise and throughput
class PolicyName(str, Enum):
    article = "article"
    default = "default"


AdviseModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help=f"Preset name, YAML spec path or HF config.json path (default: {DEFAULT_MODEL}).")]
GlobalBatchOpt = Annotated[str, typer.Option("--global-batch", help="Sequences per optimizer step over all GPUs (= micro-batch x accumulation x GPUs).")]
TopologyOpt = Annotated[Optional[Topology], typer.Option("--topology", help="How the GPUs talk (default: the hardware's fabric; multinode past one node).")]
PolicyOpt = Annotated[PolicyName, typer.Option("--policy", help="article: the source article's tree as written; default: zeroplan's.")]
PolicyFileOpt = Annotated[Optional[str], typer.Option("--policy-file", help="YAML mapping of policy thresholds to override (docs/advisor.md).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override one policy threshold, key=value; repeatable, applied after --policy-file.")]
EmitOpt = Annotated[Optional[str], typer.Option("--emit-deepspeed", help="Write a DeepSpeed config for the recommendation to this path.")]
EmitAccelerateOpt = Annotated[Optional[str], typer.Option("--emit-accelerate", help="Write an Accelerate config (FSDP or DDP) for an --engine fsdp|fsdp2|ddp recommendation to this path.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Let --emit-deepspeed / --emit-accelerate / --html overwrite an existing file.")]
MfuOpt = Annotated[Optional[float], typer.Option("--mfu", help="Share of dense peak the compute reaches (default: the hardware preset's).")]
SweepOpt = Annotated[Optional[str], typer.Option("--sweep", help="Global batches to sweep, comma-separated, or 'auto' (GPUs x 1..512).")]
MaxMicroOpt = Annotated[Optional[str], typer.Option("--max-micro-batch", help="Sweep: largest micro-batch, accumulation above it (default: the largest ZeRO-3 fits).")]


# Fine-tuning modes (docs/finetune.md); none given = full training.
class QuantType(str, Enum):
    nf4 = "nf4"
    fp4 = "fp4"


class QuantStorageName(str, Enum):
    uint8 = "uint8"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


FreezeOpt = Annotated[Optional[str], typer.Option("--freeze", help="Freeze parameters matching these comma-separated globs over Hugging Face names, e.g. 'model.embed_tokens.*,model.layers.0.*'.")]
LoraRankOpt = Annotated[Optional[str], typer.Option("--lora-rank", help="Train LoRA adapters of rank R on a frozen base.")]
LoraTargetsOpt = Annotated[Optional[str], typer.Option("--lora-targets", help="Linears given adapters: comma-separated names (q_proj,v_proj) or all-linear (default: peft's, q_proj,v_proj).")]
LoraDropoutOpt = Annotated[Optional[float], typer.Option("--lora-dropout", help="lora_dropout (0: peft uses no dropout module).")]
DoraOpt = Annotated[bool, typer.Option("--dora", help="DoRA: LoRA plus a trainable magnitude vector per adapted linear.")]
ModulesToSaveOpt = Annotated[Optional[str], typer.Option("--modules-to-save", help="Modules trained in full beside the adapters (peft modules_to_save), comma-separated.")]
QloraOpt = Annotated[bool, typer.Option("--qlora", help="QLoRA: the frozen base linears in bitsandbytes 4-bit.")]
QuantTypeOpt = Annotated[QuantType, typer.Option("--quant-type", help="--qlora: bnb_4bit_quant_type.")]
DoubleQuantOpt = Annotated[bool, typer.Option("--double-quant", help="--qlora: bnb_4bit_use_double_quant (absmax quantized to 8 bits).")]
QuantStorageOpt = Annotated[QuantStorageName, typer.Option("--quant-storage", help="--qlora: bnb_4bit_quant_storage (ZeRO-3 and FSDP need the compute dtype).")]
Int8Opt = Annotated[bool, typer.Option("--load-in-8bit", help="The frozen base linears in bitsandbytes LLM.int8 (with --lora-rank).")]
AdapterConfigOpt = Annotated[Optional[str], typer.Option("--adapter-config", help="A peft adapter_config.json as the LoRA spec (r, target_modules, lora_dropout, use_dora, modules_to_save).")]
OptimInBwdOpt = Annotated[bool, typer.Option("--optimizer-in-backward", help="The optimizer steps each parameter in backward and frees its gradient (torchtune optimizer_in_bwd; one GPU or --engine fsdp2).")]
