"""What one training run is, as the calculators take it: ZeRO stage, precision, optimizer, the step's
shape, parallelism, DeepSpeed's buffer knobs and the engine.

Frozen dataclasses the calculators trust; read from outside with zeroplan.validate.validated, which checks the
constraints in their annotations. Pure: no I/O.
"""

from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Annotated

from pydantic import Field

from zeroplan.errors import ZeroplanError
from zeroplan.validate import INPUT_CONFIG, Batch, Count, Flag, GPUs, SeqLen, Size, validated


class ZeroStage(IntEnum):
    """ZeRO stage: which model states are partitioned over the data-parallel ranks."""

    zero0 = 0  # plain data parallelism: everything replicated
    zero1 = 1  # optimizer states partitioned (P_os)
    zero2 = 2  # + gradients partitioned (P_os+g)
    zero3 = 3  # + parameters partitioned (P_os+g+p)


class OffloadDevice(str, Enum):
    none = "none"
    cpu = "cpu"
    nvme = "nvme"


class Precision(str, Enum):
    """How weights, gradients and optimizer states are stored (see memory/recipes.py for the bytes)."""

    bf16_mixed = "bf16-mixed"  # 16-bit params and grads, fp32 master + fp32 optimizer states (DeepSpeed bf16)
    fp16_mixed = "fp16-mixed"  # same bytes as bf16-mixed, with a loss scaler
    bf16_true = "bf16-true"  # everything 16-bit, no fp32 master: the source article's accounting
    fp32 = "fp32"  # everything fp32

    @property
    def compute_bytes(self) -> int:
        """Bytes of one activation element in the forward pass."""
        return 4 if self is Precision.fp32 else 2


class OptimizerImpl(str, Enum):
    """Which implementation runs AdamW's step (memory.optimizer_step): PyTorch's three, or DeepSpeed's own kernel
    (FusedAdam on the GPU, DeepSpeedCPUAdam with optimizer offload) under `fused`."""

    foreach = "foreach"  # torch.optim.AdamW(foreach=True): multi-tensor ops over the whole parameter group
    fused = "fused"  # torch.optim.AdamW(fused=True); under DeepSpeed its FusedAdam / DeepSpeedCPUAdam
    for_loop = "for-loop"  # torch.optim.AdamW(foreach=False): one tensor at a time


class Optimizer(str, Enum):
    adamw = "adamw"
    adamw_8bit = "adamw-8bit"
    paged_adamw = "paged-adamw"  # bitsandbytes PagedAdamW32bit: fp32 m and v in CUDA unified memory
    paged_adamw_8bit = "paged-adamw-8bit"  # bitsandbytes PagedAdamW8bit

    @property
    def paged(self) -> bool:
        return self in (Optimizer.paged_adamw, Optimizer.paged_adamw_8bit)
    sgd_momentum = "sgd-momentum"
    sgd = "sgd"
    lion = "lion"
    adafactor = "adafactor"


class Checkpointing(str, Enum):
    none = "none"
    selective = "selective"  # Korthikanti et al. 2022: recompute the attention core only
    # torchtitan's per-op selective AC (SelectiveAC): keep matmul (every other mm) and attention outputs
    selective_op = "selective-op"
    full = "full"  # keep each layer's input, recompute the layer in backward (every n-th layer: checkpoint_every)


class Loss(str, Enum):
    """How the cross-entropy meets the logits (docs/activations.md, loss variants)."""

    hf = "hf"  # transformers ForCausalLMLoss: logits.float(), then cross-entropy (T5: on the 16-bit logits)
    hf_shift = "hf-shift"  # transformers 4.46-4.48: ForCausalLMLoss upcasts, then copies the shifted slice
    hf_legacy = "hf-legacy"  # transformers before 4.46: the model's forward returns fp32 logits, then shifts
    no_upcast = "no-upcast"  # F.cross_entropy on the compute-dtype logits
    chunked = "chunked"  # torchtune CEWithChunkedOutputLoss: 8 chunks, each upcast on its own
    liger = "liger"  # Liger Kernel LigerFusedLinearCrossEntropyLoss: no full logits


class TrainingLoop(str, Enum):
    """Whose loop runs the micro-steps, for what it keeps alive from one micro-step into the next (docs/activations.md).

    trainer: HF Trainer, Accelerate, TRL, torchtune, torchtitan: a micro-step's outputs and graph are gone before the
    next forward. litgpt: litgpt's finetune scripts on Lightning Fabric (Lightning-AI/litgpt@00af8b0
    litgpt/finetune/lora.py lines 303-310): Fabric returns the logits in fp32 (HalfPrecision.convert_output), and the
    loop's `logits` keeps the previous micro-step's, and through their grad_fn its graph, until the next forward
    returns (memory.activations.loop).
    """

    trainer = "trainer"
    litgpt = "litgpt"

    @classmethod
    def of(cls, given: "TrainingLoop | str | None", four_bit: bool, qlora_stack: str) -> "TrainingLoop":
        """The loop given, else the one a 4-bit base's stack implies: litgpt's QLoRA runs only in litgpt's scripts."""
        if given is not None:
            return cls(getattr(given, "value", given))
        return cls.litgpt if four_bit and str(getattr(qlora_stack, "value", qlora_stack)) == cls.litgpt.value else cls.trainer


class PostTraining(str, Enum):
    """What the step trains on (docs/finetune.md, post-training): one batch of sequences, preference pairs, unpaired
    rows beside a frozen reference, or a teacher's distribution.

    Preference trainers forward the chosen and rejected rows of each pair concatenated (TRL's DPOTrainer
    `_compute_loss`, ORPOTrainer and CPOTrainer `concatenated_inputs`: huggingface/trl@f2cd577); DPO, KTO and ASFT
    also forward a frozen reference model, knowledge distillation a teacher (memory.reference, memory.teacher).
    """

    sft = "sft"  # one sequence per row: pre-training and supervised fine-tuning
    dpo = "dpo"  # pairs, and a reference model (a frozen copy; under peft the adapter-disabled base)
    orpo = "orpo"  # pairs, no reference model (trl/experimental/orpo/orpo_trainer.py)
    simpo = "simpo"  # pairs, no reference model (trl/experimental/cpo/cpo_trainer.py, loss_type simpo)
    kto = "kto"  # unpaired rows and their KL batch, a reference model (trl/trainer/kto_trainer.py)
    asft = "asft"  # SFT with a KL to a frozen reference (LLaMA-Factory use_asft_loss)
    kd = "kd"  # knowledge distillation from a teacher model's logits (TRL GKDTrainer, off-policy)

    @property
    def rows_per_sequence(self) -> int:
        """Sequences forwarded per micro-batch row: 2 for a (chosen, rejected) pair."""
        return PAIR_ROWS if self.paired else 1

    @property
    def paired(self) -> bool:
        return self in (PostTraining.dpo, PostTraining.orpo, PostTraining.simpo)

    @property
    def reference(self) -> bool:
        """A frozen copy of the policy is forwarded (or, under peft, its adapter-disabled base)."""
        return self in (PostTraining.dpo, PostTraining.kto, PostTraining.asft)


PAIR_ROWS = 2  # chosen + rejected, concatenated on the batch dimension (huggingface/trl@f2cd577 dpo_trainer.py)


EVERY_PREFIX = "every:"


def parse_checkpointing(value: "Checkpointing | str") -> tuple[Checkpointing, int]:
    """(mode, every) from none | selective | selective-op | full | every:N (full checkpointing of every N-th layer,
    torchtitan's layer SAC `selective_ac_option = N`). ZeroplanError on anything else."""
    if isinstance(value, Checkpointing):
        return value, 1
    text = str(value).strip()
    if text.startswith(EVERY_PREFIX):
        count = text[len(EVERY_PREFIX):]
        if not count.isdigit() or int(count) < 1:
            raise ZeroplanError(f"--checkpointing {text}: every:N needs a whole number of layers N >= 1")
        return Checkpointing.full, int(count)
    try:
        return Checkpointing(text), 1
    except ValueError:
        names = ", ".join(c.value for c in Checkpointing)
        raise ZeroplanError(f"--checkpointing {text!r}: expected one of {names} or every:N") from None


def checkpointing_label(mode: Checkpointing, every: int) -> str:
    """The spelling --checkpointing takes back: every:N for full checkpointing of every N-th layer."""
    return f"{EVERY_PREFIX}{every}" if mode is Checkpointing.full and every > 1 else mode.value


class Float8Recipe(str, Enum):
    """torchao's Float8Linear training recipes (torchao==0.18.0 float8/config.py Float8LinearRecipeName; memory.float8)."""

    none = "none"
    tensorwise = "tensorwise"
    rowwise = "rowwise"
    rowwise_with_gw_hp = "rowwise-with-gw-hp"


class Attention(str, Enum):
    eager = "eager"  # materialises the a x s x s score and probability matrices
    flash = "flash"  # SDPA / FlashAttention: no score matrices kept


@dataclass(frozen=True, slots=True, kw_only=True)
class Parallelism:
    """GPUs and nodes. Only data parallelism is modelled, so the data-parallel degree is the GPU count."""

    __pydantic_config__ = INPUT_CONFIG
    gpus: Annotated[GPUs, Field(description="total GPUs (world size)")] = 8
    nodes: Annotated[GPUs, Field(description="nodes the GPUs are spread over")] = 1

    def __post_init__(self) -> None:
        if self.gpus % self.nodes:
            raise ValueError(f"gpus ({self.gpus}) is not a multiple of nodes ({self.nodes})")

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def dp(self) -> int:
        """Data-parallel degree: what ZeRO partitions over (no TP/PP modelled)."""
        return self.gpus


def fewest_nodes(gpus: int, gpus_per_node: int | None) -> int:
    """ceil(gpus / gpus_per_node): the fewest nodes of that size that hold the GPUs (one without a node size)."""
    return -(-gpus // gpus_per_node) if gpus_per_node else 1


def spread_gpus(gpus: int, nodes: int | None, gpus_per_node: int | None, hardware: str = "the hardware") -> Parallelism:
    """The one rule for GPUs and nodes, for every command and plan.

    nodes given: used as given, refused when it puts more GPUs on a node than one holds. nodes None: the fewest
    nodes of `gpus_per_node` that hold the GPUs evenly (one node without hardware). gpus_per_node comes from the
    hardware preset (None: no hardware, no limit).
    """
    if nodes is None:
        nodes = fewest_nodes(gpus, gpus_per_node)
        if gpus % nodes:
            raise ZeroplanError(f"{gpus} GPUs do not split evenly over the {nodes} nodes of {gpus_per_node} they need "
                             f"on {hardware}; give the nodes (e.g. --nodes {nodes})")
    par = validated(Parallelism, {"gpus": gpus, "nodes": nodes})
    if gpus_per_node and par.gpus_per_node > gpus_per_node:
        raise ZeroplanError(f"{par.gpus_per_node} GPUs per node ({gpus} GPUs on {nodes} node{'s' * (nodes > 1)}) exceed the "
                         f"{gpus_per_node} a {hardware} node holds; give more nodes or leave the nodes out")
    return par


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSetup:
    """What one training step looks like on one GPU."""

    __pydantic_config__ = INPUT_CONFIG
    precision: Precision = Precision.bf16_mixed
    optimizer: Optimizer = Optimizer.adamw
    fp32_grad_accum: Annotated[Flag, Field(description="accumulate gradients in fp32 (grad_accum_dtype=fp32)")] = False
    optimizer_impl: OptimizerImpl | None = None  # None: the stack's default (memory.optimizer_step.default_impl)
    seq_len: Annotated[SeqLen, Field(description="tokens per sequence")] = 2048
    micro_batch: Annotated[Batch, Field(description="sequences per GPU per micro-step")] = 1
    grad_accum: Annotated[Batch, Field(description="micro-steps per optimizer step")] = 1
    checkpointing: Checkpointing = Checkpointing.none
    checkpoint_every: Annotated[Count, Field(description="full checkpointing: only every n-th layer (torchtitan layer SAC)")] = 1
    attention: Attention = Attention.flash
    loss: Loss = Loss.hf
    post_training: PostTraining = PostTraining.sft
    compile: Annotated[Flag, Field(description="torch.compile of each block (inductor): AOTAutograd's saved tensors")] = False
    training_loop: TrainingLoop = TrainingLoop.trainer
    float8: Float8Recipe = Float8Recipe.none  # torchao Float8Linear training of the blocks' linears (memory.float8)

    @property
    def checkpointing_label(self) -> str:
        return checkpointing_label(self.checkpointing, self.checkpoint_every)

    @property
    def tokens_per_micro_step(self) -> int:
        return self.seq_len * self.micro_batch


# DeepSpeed zero_optimization defaults and bounds (deepspeed/runtime/zero/config.py at v0.19.8).
DS_REDUCE_BUCKET_SIZE = 500_000_000


DS_ALLGATHER_BUCKET_SIZE = 500_000_000


DS_PREFETCH_BUCKET_SIZE = 50_000_000


DS_PARAM_PERSISTENCE_THRESHOLD = 100_000


DS_MODEL_PERSISTENCE_THRESHOLD = 2**63 - 1  # sys.maxsize


DS_MAX_LIVE_PARAMETERS = 1_000_000_000


DS_SUB_GROUP_SIZE = 1_000_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class DeepSpeedKnobs:
    """The zero_optimization keys that size GPU buffers, with DeepSpeed's code defaults."""

    __pydantic_config__ = INPUT_CONFIG
    reduce_bucket_size: Count = DS_REDUCE_BUCKET_SIZE
    allgather_bucket_size: Size = DS_ALLGATHER_BUCKET_SIZE
    overlap_comm: Annotated[Flag | None, Field(description="None = DeepSpeed's default: true for stage 3 only")] = None
    contiguous_gradients: Flag = True
    stage3_prefetch_bucket_size: Size = DS_PREFETCH_BUCKET_SIZE
    stage3_param_persistence_threshold: Size = DS_PARAM_PERSISTENCE_THRESHOLD
    stage3_model_persistence_threshold: Size = DS_MODEL_PERSISTENCE_THRESHOLD
    stage3_max_live_parameters: Size = DS_MAX_LIVE_PARAMETERS
    sub_group_size: Size = DS_SUB_GROUP_SIZE
    zero_hpz_partition_size: Annotated[Count, Field(description="ZeRO++ hpZ secondary partition size (1 = off)")] = 1
    zero_quantized_weights: Annotated[Flag, Field(description="ZeRO++ qwZ")] = False
    zero_quantized_gradients: Annotated[Flag, Field(description="ZeRO++ qgZ")] = False
    offload_optimizer: OffloadDevice = OffloadDevice.none
    offload_param: OffloadDevice = OffloadDevice.none

    def overlap_comm_for(self, stage: ZeroStage) -> bool:
        if self.overlap_comm is None:
            return stage is ZeroStage.zero3
        return self.overlap_comm


class Engine(str, Enum):
    """The training engine a ZeRO stage is mapped onto (zeroplan.engines)."""

    deepspeed = "deepspeed"
    fsdp = "fsdp"  # torch.distributed.fsdp.FullyShardedDataParallel (FSDP1, flat parameters)
    fsdp2 = "fsdp2"  # torch.distributed.fsdp.fully_shard (per-parameter DTensor sharding)
    ddp = "ddp"  # DistributedDataParallel, with ZeroRedundancyOptimizer at stage 1
    none = "none"  # one GPU, no wrapper: a plain PyTorch loop and its optimizer


class ReduceDtype(str, Enum):
    """The dtype FSDP reduce-scatters gradients in (MixedPrecisionPolicy.reduce_dtype)."""

    fp32 = "fp32"  # torchtitan's default (mixed_precision_reduce = "float32")
    bf16 = "bf16"


class AdapterWrap(str, Enum):
    """Where FSDP1 puts LoRA adapters: units of their own, or inside the block they adapt."""

    own = "own"  # peft's fsdp_auto_wrap_policy (Accelerate, HF Trainer): only adapter units carry gradients
    block = "block"  # ModuleWrapPolicy({Block}) with use_orig_params=True (litgpt / Lightning Fabric)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """PyTorch engine settings that size memory, with PyTorch's defaults."""

    __pydantic_config__ = INPUT_CONFIG
    gradient_as_bucket_view: Annotated[Flag, Field(description="DDP: gradients are views into the all-reduce buckets")] = False
    reduce_dtype: Annotated[ReduceDtype | None, Field(
        description="FSDP2 MixedPrecisionPolicy.reduce_dtype (None: PyTorch's default, the param dtype)")] = None
    no_sync: Annotated[Flag, Field(
        description="FSDP under gradient accumulation: no reduce-scatter but on the last micro-step (Accelerate's, HF "
                    "Trainer's and Lightning's default), keeping whole gradients until then")] = False
    adapter_wrap: Annotated[AdapterWrap, Field(
        description="FSDP1 + LoRA: adapters in FSDP units of their own, or in their block's flat parameter")] = AdapterWrap.own
    float8_all_gather: Annotated[Flag, Field(
        description="FSDP2 + --float8 tensorwise: the blocks' linear weights all-gathered in float8 (torchao "
                    "enable_fsdp_float8_all_gather; memory.float8)")] = False
