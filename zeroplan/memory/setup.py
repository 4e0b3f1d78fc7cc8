"""What one training run is, as the calculators take it: ZeRO stage, precision, optimizer, the step's
shape, parallelism, DeepSpeed's buffer knobs and the engine.

Frozen records (zeroplan.record). Pure: no I/O.
"""

from enum import Enum, IntEnum

from zeroplan.record import FieldError, Record, field, positive, record


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


class Optimizer(str, Enum):
    adamw = "adamw"
    adamw_8bit = "adamw-8bit"
    sgd_momentum = "sgd-momentum"
    sgd = "sgd"
    lion = "lion"
    adafactor = "adafactor"


class Checkpointing(str, Enum):
    none = "none"
    selective = "selective"  # Korthikanti et al. 2022: recompute the attention core only
    full = "full"  # keep each layer's input, recompute the layer in backward


class Attention(str, Enum):
    eager = "eager"  # materialises the a x s x s score and probability matrices
    flash = "flash"  # SDPA / FlashAttention: no score matrices kept


@record
class Parallelism(Record):
    """GPUs and nodes. Only data parallelism is modelled, so the data-parallel degree is the GPU count."""

    gpus: int = positive(8, description="total GPUs (world size)")
    nodes: int = positive(1, description="nodes the GPUs are spread over")

    def _check(self) -> None:
        if self.gpus % self.nodes:
            raise FieldError(f"gpus ({self.gpus}) is not a multiple of nodes ({self.nodes})")

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def dp(self) -> int:
        """Data-parallel degree: what ZeRO partitions over (no TP/PP modelled)."""
        return self.gpus


@record
class TrainingSetup(Record):
    """What one training step looks like on one GPU."""

    precision: Precision = Precision.bf16_mixed
    optimizer: Optimizer = Optimizer.adamw
    fp32_grad_accum: bool = field(False, description="accumulate gradients in fp32 (grad_accum_dtype=fp32)")
    seq_len: int = positive(2048, description="tokens per sequence")
    micro_batch: int = positive(1, description="sequences per GPU per micro-step")
    grad_accum: int = positive(1, description="micro-steps per optimizer step")
    checkpointing: Checkpointing = Checkpointing.none
    attention: Attention = Attention.flash

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


@record
class DeepSpeedKnobs(Record):
    """The zero_optimization keys that size GPU buffers, with DeepSpeed's code defaults."""

    reduce_bucket_size: int = positive(DS_REDUCE_BUCKET_SIZE)
    allgather_bucket_size: int = field(DS_ALLGATHER_BUCKET_SIZE, ge=0)
    overlap_comm: bool | None = field(None, description="None = DeepSpeed's default: true for stage 3 only")
    contiguous_gradients: bool = True
    stage3_prefetch_bucket_size: int = field(DS_PREFETCH_BUCKET_SIZE, ge=0)
    stage3_param_persistence_threshold: int = field(DS_PARAM_PERSISTENCE_THRESHOLD, ge=0)
    stage3_model_persistence_threshold: int = field(DS_MODEL_PERSISTENCE_THRESHOLD, ge=0)
    stage3_max_live_parameters: int = field(DS_MAX_LIVE_PARAMETERS, ge=0)
    sub_group_size: int = field(DS_SUB_GROUP_SIZE, ge=0, description="0 = one ZeRO-3 sub-group per parameter")
    zero_hpz_partition_size: int = positive(1, description="ZeRO++ hpZ secondary partition size (1 = off)")
    zero_quantized_weights: bool = field(False, description="ZeRO++ qwZ")
    zero_quantized_gradients: bool = field(False, description="ZeRO++ qgZ")
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


@record
class EngineOptions(Record):
    """PyTorch engine settings that size memory, with PyTorch's defaults."""

    gradient_as_bucket_view: bool = field(False, description="DDP: gradients are views into the all-reduce buckets")
