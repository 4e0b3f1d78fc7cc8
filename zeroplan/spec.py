"""The inputs: the normalized model architecture, training setup, parallelism, DeepSpeed knobs, hardware.

Frozen records (zeroplan.record): every field type-checked and bounded on construction, unknown keys
rejected by name. Pure: imports neither pydantic, rich, typer nor yaml and does no I/O.
"""

import re
from enum import Enum, IntEnum
from typing import Literal

from zeroplan.errors import ZeroplanError
from zeroplan.record import FieldError, Record, field, positive, record

MAX_COUNT = 10**18  # parameter counts and sizes beyond this are typos, not models
# The usual spellings, parsed with int(): 124439808, 9e9, 7E+09 (exact, as Decimal would give them).
# At most 30 digits and a two-digit exponent, so int() and 10**e stay small (int() refuses 4,300+
# digits); anything longer is past MAX_COUNT anyway and goes to Decimal, which says so.
_PLAIN_COUNT = re.compile(r"([0-9]{1,30})(?:[eE]\+?([0-9]{1,2}))?")


def parse_count(text: str, what: str = "count") -> int:
    """A positive whole number from '9e9', '7_000_000_000', '1.5e9' or '124439808'; ZeroplanError otherwise."""
    cleaned = text.strip().replace("_", "").replace(",", "")
    if plain := _PLAIN_COUNT.fullmatch(cleaned):
        digits, exponent = plain.groups()
        value = int(digits) * 10 ** int(exponent or 0)
    else:  # decimals, signs, big exponents, words: Decimal's exact reading (loaded only then)
        value = _decimal_count(cleaned, text, what)
    if value <= 0:
        raise ZeroplanError(f"{what} {text!r} must be positive")
    if value > MAX_COUNT:
        raise ZeroplanError(f"{what} {text!r} is larger than {MAX_COUNT:.0e}")
    return int(value)


def _decimal_count(cleaned: str, text: str, what: str):
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        raise ZeroplanError(f"{what} {text!r} is not a number") from None
    if not value.is_finite():
        raise ZeroplanError(f"{what} {text!r} is not finite")
    if value != value.to_integral_value():
        raise ZeroplanError(f"{what} {text!r} is not a whole number")
    return value


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
    """How weights, gradients and optimizer states are stored (see recipes.py for the bytes)."""

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


class Topology(str, Enum):
    """How the data-parallel GPUs are connected (reference/hardware.md 2e)."""

    nvlink = "nvlink"  # one node, GPUs on the node's fast fabric (NVLink/NVSwitch; xGMI on AMD)
    pcie = "pcie"  # one node, GPUs talk over PCIe only
    multinode = "multinode"  # several nodes: rings cross the NICs


class Attention(str, Enum):
    eager = "eager"  # materialises the a x s x s score and probability matrices
    flash = "flash"  # SDPA / FlashAttention: no score matrices kept


@record
class Architecture(Record):
    """The shape facts the calculators need, normalized across model families.

    Built by `zeroplan.families` from a family's Hugging Face config; never written by hand.
    """

    family: str = field(description="model family, the HF model_type (llama, gpt2, t5, ...)")
    hidden_size: int = positive()
    num_layers: int = positive(description="decoder layers (T5: decoder layers too)")
    num_encoder_layers: int = field(0, ge=0, description="encoder layers of an encoder-decoder (T5)")
    num_attention_heads: int = positive()
    num_key_value_heads: int = positive()
    head_dim: int = positive()
    intermediate_size: int = positive(description="MLP inner width (per expert for MoE)")
    vocab_size: int = positive()
    gated_mlp: bool = field(description="SwiGLU/GeGLU: three MLP matrices and an extra inner tensor")
    norm: Literal["layernorm", "rmsnorm"]
    norms_per_layer: int = positive(2, description="Gemma 2 has 4 (pre and post norms)")
    parallel_attn: bool = field(False, description="attention and MLP read the same normed input")
    num_experts: int = field(0, ge=0, description="routed experts per MoE layer; 0 = dense")
    num_experts_per_tok: int = field(0, ge=0)
    tie_word_embeddings: bool
    learned_positions: int = field(0, ge=0, description="rows of a learned position table (GPT-2, OPT)")
    dropout: float = field(0.0, ge=0.0, le=1.0, description="dropout probability in training")
    attention_dropout: float = field(
        0.0, ge=0.0, le=1.0, description="dropout probability on the attention probabilities in training"
    )
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    sliding_window: int | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


@record
class ParamCount(Record):
    """Exact parameter counts of one model, tied weights counted once."""

    num_params: int = field(description="all parameters, tied weights once")
    num_embedding_params: int = field(description="token (and learned position) embeddings, plus an untied LM head")
    largest_layer_params: int = field(
        description="max over modules of their own direct parameters (DeepSpeed's model_to_params)"
    )
    num_active_params: int = field(description="parameters one token touches (MoE: top-k experts); = num_params if dense")


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


# DeepSpeed zero_optimization defaults (deepspeed/runtime/zero/config.py at v0.19.6; reference/deepspeed.md 4.3).
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
    allgather_bucket_size: int = positive(DS_ALLGATHER_BUCKET_SIZE)
    overlap_comm: bool | None = field(None, description="None = DeepSpeed's default: true for stage 3 only")
    contiguous_gradients: bool = True
    stage3_prefetch_bucket_size: int = field(DS_PREFETCH_BUCKET_SIZE, ge=0)
    stage3_param_persistence_threshold: int = field(DS_PARAM_PERSISTENCE_THRESHOLD, ge=0)
    stage3_model_persistence_threshold: int = field(DS_MODEL_PERSISTENCE_THRESHOLD, ge=0)
    stage3_max_live_parameters: int = field(DS_MAX_LIVE_PARAMETERS, ge=0)
    sub_group_size: int = positive(DS_SUB_GROUP_SIZE)
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


@record
class HardwareSpec(Record):
    """One accelerator model and the node it usually sits in. Numbers come from configs/hardware/*.yaml."""

    name: str
    source: str = field(description="datasheet / measurement the numbers come from")
    memory_gib: float = field(gt=0, description="capacity as software sees it (nvidia-smi total), GiB")
    bf16_tflops: float = field(ge=0, description="dense bf16 tensor TFLOPS (0 = no bf16)")
    fp16_tflops: float = field(gt=0, description="dense fp16 tensor TFLOPS")
    fp32_tflops: float = field(gt=0, description="dense fp32 (non-tensor) TFLOPS")
    hbm_bandwidth_tbps: float = field(gt=0, description="memory bandwidth, TB/s")
    supports_bf16: bool
    gpus_per_node: int = positive()
    intra_node_fabric: Literal["nvlink", "pcie", "xgmi"]
    intra_node_busbw_gbps: float = field(gt=0, description="measured large-message collective bus bandwidth in a node, GB/s")
    intra_node_alpha_us: float = field(gt=0, description="latency of one collective inside a node, microseconds")
    pcie_busbw_gbps: float = field(gt=0, description="collective bus bandwidth when the node's GPUs talk over PCIe only, GB/s")
    pcie_alpha_us: float = field(gt=0, description="latency of one collective over PCIe, microseconds")
    nic_gbps_per_gpu: float = field(gt=0, description="inter-node NIC bandwidth per GPU, GB/s (decimal bytes)")
    inter_node_alpha_us: float = field(gt=0, description="latency of one collective that crosses nodes, microseconds")
    host_link_gbps: float = field(gt=0, description="GPU<->host bandwidth per direction, GB/s (PCIe)")
    default_mfu: float = field(gt=0, le=1, description="model FLOPs utilisation assumed when none is given")
    cuda_context_gib: float = field(ge=0, description="CUDA context + kernels per process, GiB")
    nccl_gib: float = field(ge=0, description="NCCL communicator buffers per process, GiB")

    def _check(self) -> None:
        if self.supports_bf16 != (self.bf16_tflops > 0):
            raise FieldError(
                f"supports_bf16 ({self.supports_bf16}) disagrees with bf16_tflops ({self.bf16_tflops}): "
                "bf16_tflops is 0 exactly when the hardware has no bf16"
            )
