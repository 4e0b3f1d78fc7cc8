"""A plan: one planned training run, as `zeroplan check` reads it from a YAML file (configs/plans/*.yaml).

Key names follow DeepSpeed where it has one (train_batch_size, train_micro_batch_size_per_gpu,
gradient_accumulation_steps), Hugging Face where it has one (attn_implementation), and zeroplan's CLI
options otherwise (precision, optimizer, seq_len, checkpointing). Schema: docs/checks.md.

Pure: check/planfiles.py reads the file, resolves the presets and the DeepSpeed config, and builds the Scenario;
check/merge.py settles the plan's training setup against that config.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PositiveInt,
    model_validator,
)

from zeroplan.deepspeed.batch import BATCH_KEYS
from zeroplan.errors import ZeroplanError
from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import (
    Attention,
    Checkpointing,
    Engine,
    EngineOptions,
    Float8Recipe,
    Loss,
    Optimizer,
    OptimizerImpl,
    Parallelism,
    PostTraining,
    Precision,
    TrainingLoop,
    TrainingSetup,
    parse_checkpointing,
    spread_gpus,
)
from zeroplan.models.mesh import CpComm, Mesh, Schedule
from zeroplan.units import parse_count
from zeroplan.validate import MAX_BATCH, MAX_GLOBAL_BATCH, MAX_SEQ_LEN


def _count(value: Any) -> Any:
    """9e9 in YAML is the string '9e9' (YAML 1.1 wants 9.0e+9): read counts as --params does."""
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number, got {str(value).lower()}")
    if isinstance(value, (str, float)):
        try:
            return parse_count(str(value) if isinstance(value, str) else repr(value), "count")
        except ZeroplanError as exc:
            raise ValueError(str(exc).removeprefix("count ")) from None
    return value


Count = Annotated[PositiveInt, BeforeValidator(_count)]
MICRO, GAS, TBS = BATCH_KEYS  # train_micro_batch_size_per_gpu, gradient_accumulation_steps, train_batch_size

def _checkpointing_text(value: str) -> str:
    try:
        parse_checkpointing(value)
    except ZeroplanError as err:
        raise ValueError(str(err).replace("--checkpointing ", "")) from None
    return value


# none, selective, selective-op, full or every:N, as --checkpointing takes them (memory.setup.parse_checkpointing)
CheckpointingText = Annotated[
    str, BeforeValidator(lambda v: v.value if isinstance(v, Checkpointing) else v), AfterValidator(_checkpointing_text)
]
# Hugging Face `attn_implementation` values; all but eager keep no score matrices (zeroplan's `flash`).
AttnImplementation = Literal["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]


class PlanMesh(Frozen):
    """The parallel mesh beyond data parallelism, as `estimate --tp --pp --cp --ep --vpp --pp-schedule
    --sequence-parallel --cp-comm` take it (docs/parallelism.md); the data-parallel degree is gpus / (tp x pp x cp)."""

    tp: Count = 1
    pp: Count = 1
    cp: Count = 1
    ep: Count = 1
    vpp: Count | None = None
    sequence_parallel: bool = False
    pp_schedule: Schedule | None = None
    # false: the token embedding whole and the logits gathered on every rank (Hugging Face's tp_plan, as
    # Accelerate's ParallelismConfig applies it); true: vocab-parallel (Megatron, torchtitan)
    vocab_parallel: bool = True
    # layers of the first / last pipeline stage (Megatron-LM's --decoder-first/last-pipeline-num-layers); none:
    # equal stages where the layers divide, torchtitan's default split where they do not (docs/parallelism.md)
    pp_first_layers: Count | None = None
    pp_last_layers: Count | None = None
    cp_comm: CpComm = CpComm.p2p  # a2a: DeepSpeed-Ulysses (a ds_config's sequence_parallel_size)

    def mesh(self, gpus: int) -> Mesh:
        return Mesh(gpus=gpus, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep, vpp=self.vpp,
                    sequence_parallel=self.sequence_parallel, schedule=self.pp_schedule,
                    vocab_parallel_embedding=self.vocab_parallel, vocab_parallel_logits=self.vocab_parallel,
                    pp_first_layers=self.pp_first_layers, pp_last_layers=self.pp_last_layers,
                    cp_comm=self.cp_comm)


class Training(Frozen):
    """What one step looks like: the plan's counterpart of Hugging Face TrainingArguments."""

    precision: Precision = Precision.bf16_mixed
    optimizer: Optimizer = Optimizer.adamw
    optimizer_impl: OptimizerImpl | None = None  # AdamW's step; None: the stack's default (memory.optimizer_step)
    seq_len: Count = Field(2048, le=MAX_SEQ_LEN, description="tokens per sequence")
    train_micro_batch_size_per_gpu: Count = Field(1, le=MAX_BATCH, description="sequences per GPU per micro-step")
    gradient_accumulation_steps: Count | None = Field(None, le=MAX_BATCH, description="micro-steps per optimizer step")
    train_batch_size: Count | None = Field(None, le=MAX_GLOBAL_BATCH, description="global batch: micro-batch x accumulation x GPUs")
    checkpointing: CheckpointingText = "none"
    attn_implementation: AttnImplementation = "sdpa"
    loss: Loss = Loss.hf
    post_training: PostTraining = Field(PostTraining.sft, description="sft; preference pairs: dpo (a reference "
                                        "model), orpo, simpo; kto, asft (a reference model); kd (a teacher) "
                                        "(memory.reference, memory.posttrain)")
    training_loop: TrainingLoop | None = Field(None, description="trainer or litgpt: what the loop keeps between "
                                               "micro-steps (docs/activations.md); absent: litgpt under a finetune "
                                               "block's 4-bit quant with qlora_stack litgpt, else trainer")
    compile: bool = Field(False, description="torch.compile of each block (docs/activations.md), as --compile")
    float8: Float8Recipe = Field(Float8Recipe.none, description="torchao Float8Linear training of the blocks' linears "
                                 "(docs/float8.md), as --float8")
    teacher: str | None = Field(None, description="post_training kd: the teacher model (a preset, a YAML spec or "
                                "config.json relative to the plan, or a Hub id)")

    @property
    def attention(self) -> Attention:
        return Attention.eager if self.attn_implementation == "eager" else Attention.flash


# The ZeRO stage each PyTorch engine's own setting maps to (memory/engines/__init__.py, docs/engines.md).
FSDP_STRATEGY_STAGES = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}  # torch FSDP1 ShardingStrategy
FSDP2_RESHARD_STAGES = {True: 3, False: 2}  # fully_shard(reshard_after_forward=...)


class PlanFsdp(Frozen):
    """An FSDP or FSDP2 plan's sharding in the engine's own words, instead of a `deepspeed:` block."""

    sharding_strategy: Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"] | None = Field(
        None, description="--engine fsdp: FSDP1's ShardingStrategy")
    reshard_after_forward: bool | None = Field(None, description="--engine fsdp2: fully_shard's reshard_after_forward")


class PlanOverheads(Frozen):
    """Overrides of the hardware profile's per-GPU overheads (as --cuda-context-gib, --nccl-gib, --fragmentation)."""

    cuda_context_gib: float | None = Field(None, ge=0, le=1024)
    nccl_gib: float | None = Field(None, ge=0, le=1024)
    fragmentation: float | None = Field(None, ge=0, le=1)


class Plan(Frozen):
    """One planned run: model, hardware, GPUs, training setup and the DeepSpeed config it will use."""

    description: str | None = None
    model: str | None = Field(None, description="preset name, YAML spec or HF config.json path (relative to the plan)")
    params: Count | None = Field(None, description="a bare parameter count instead of model")
    largest_layer: Count | None = Field(None, description="largest layer's parameters (DeepSpeed's definition)")
    hardware: str = Field(description="hardware preset name or YAML path (relative to the plan)")
    gpus: Count = Field(description="total GPUs, the data-parallel degree")
    nodes: Count | None = Field(None, description="nodes the GPUs are spread over (default: the fewest of the hardware's size)")
    topology: Topology | None = Field(None, description="pcie: the GPUs talk over PCIe even if the preset has NVLink")
    training: Training = Field(default_factory=Training)
    deepspeed: str | dict[str, Any] | None = Field(None, description="ds_config.json path (relative to the plan) or an "
                                                   "inline block; FSDP and FSDP2 plans may give `fsdp:` instead")
    fsdp: PlanFsdp | None = Field(None, description="an FSDP / FSDP2 plan's sharding, in the engine's words")
    ignore: tuple[str, ...] = Field((), description="rule ids not checked for this plan")
    min_headroom_pct: float | None = Field(None, ge=0, lt=100, description="low-headroom threshold, % of capacity")
    overheads: PlanOverheads = Field(default_factory=PlanOverheads)
    calibration: str | None = Field(None, description="a `zeroplan calibrate --save` file (relative to the plan): "
                                    "overheads measured on this hardware, under `overheads`' typed values")
    engine: Engine = Field(Engine.deepspeed, description="the engine the config's ZeRO stage maps onto (docs/engines.md)")
    engine_options: EngineOptions = Field(default_factory=EngineOptions)
    mesh: PlanMesh | None = Field(None, description="tp, pp, cp, ep, vpp, sequence_parallel, pp_schedule, pp_first_layers, pp_last_layers "
                                  "(docs/parallelism.md); absent: data parallelism only")
    finetune: dict[str, Any] | None = Field(None, description="the fine-tuning mode (docs/finetune.md): lora_rank, "
                                            "lora_targets, freeze, quant, ... or adapter_config (a peft file)")

    @model_validator(mode="after")
    def _check(self) -> Plan:
        if (self.model is None) == (self.params is None):
            raise ValueError("give either model (a preset or file) or params (a count), not both or neither")
        if self.params is not None and self.largest_layer is not None and self.largest_layer > self.params:
            raise ValueError(f"largest_layer ({self.largest_layer:,}) is larger than params ({self.params:,})")
        if self.nodes is not None:
            Parallelism(gpus=self.gpus, nodes=self.nodes)  # gpus (12) is not a multiple of nodes (5)
        if self.topology is Topology.multinode and self.nodes == 1:
            raise ValueError("topology multinode needs nodes > 1")
        self._check_engine_block()
        self._check_batch()
        return self

    def _check_engine_block(self) -> None:
        """`deepspeed:` for DeepSpeed; `fsdp:` (its engine's key) or a `deepspeed:` stand-in for FSDP and FSDP2;
        DDP and a single device (engine none) need neither (ZeRO-0)."""
        engine, fsdp = self.engine, self.fsdp
        if fsdp is not None and self.deepspeed is not None:
            raise ValueError("give fsdp: or deepspeed:, not both (fsdp: states the stage in the engine's words)")
        if fsdp is not None and engine not in (Engine.fsdp, Engine.fsdp2):
            raise ValueError(f"fsdp: is for engine fsdp or fsdp2, not {engine.value}")
        if fsdp is None and self.deepspeed is None and engine not in (Engine.ddp, Engine.none):
            raise ValueError("give deepspeed: (a ds_config path or an inline block)" if engine is Engine.deepspeed
                             else f"give fsdp: ({_FSDP_KEY[engine]}) or a deepspeed: block with the stage")
        if fsdp is not None and (wrong := fsdp.model_fields_set - {_FSDP_KEY[engine]}):
            raise ValueError(f"fsdp.{sorted(wrong)[0]} is not engine {engine.value}'s setting; it takes "
                             f"fsdp.{_FSDP_KEY[engine]}")
        if fsdp is not None and getattr(fsdp, _FSDP_KEY[engine]) is None:
            raise ValueError(f"fsdp: give {_FSDP_KEY[engine]}")

    def engine_stage(self) -> int:
        """The ZeRO stage of a plan without `deepspeed:` (its `fsdp:` setting, or ZeRO-0 for DDP)."""
        if self.fsdp is None:
            return 0
        if self.engine is Engine.fsdp:
            return FSDP_STRATEGY_STAGES[self.fsdp.sharding_strategy]
        return FSDP2_RESHARD_STAGES[self.fsdp.reshard_after_forward]

    def standin_config(self) -> dict[str, Any]:
        """The DeepSpeed block zeroplan reads for a PyTorch engine: the `deepspeed:` stand-in (or the `fsdp:` stage)
        with the batch and precision the plan's `training:` states where the block has none: an FSDP or DDP run
        has no DeepSpeed batch check of its own, its trainer takes the batch and precision from its arguments."""
        block = dict(self.deepspeed) if isinstance(self.deepspeed, dict) else {
            "zero_optimization": {"stage": self.engine_stage()}}
        micro, gas = self.batch()
        if not {MICRO, TBS} & block.keys():
            block.setdefault(MICRO, micro)
            block.setdefault(GAS, gas)
        if not {"fp16", "bf16", "bfloat16"} & block.keys():  # nor a precision: the plan's (training.precision)
            precision = self.training.precision
            block["fp16"] = {"enabled": precision is Precision.fp16_mixed}
            block["bf16"] = {"enabled": precision in (Precision.bf16_mixed, Precision.bf16_true)}
            if precision is Precision.bf16_true:
                block["bf16"] |= {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}
        return block

    @property
    def data_parallel(self) -> int:
        """gpus / (tp x pp x cp) of the plan's mesh (at least 1; a mesh that does not divide is a finding)."""
        m = self.mesh
        return max(1, self.gpus // (m.tp * m.pp * m.cp)) if m else self.gpus

    def _check_batch(self) -> None:
        """A train_batch_size no whole micro-batch and accumulation reach is an error whatever the config says."""
        t, dp = self.training, self.data_parallel
        ranks = "data-parallel ranks" if self.mesh else "gpus"
        total = t.train_batch_size
        micro, gas = self.batch()
        if total is None or micro * gas * dp == total:
            return
        if {MICRO, GAS} <= t.model_fields_set:
            raise ValueError(f"train_batch_size ({total}) != train_micro_batch_size_per_gpu ({micro}) x "
                             f"gradient_accumulation_steps ({gas}) x {ranks} ({dp}) = {micro * gas * dp}")  # fmt: skip
        key, known = (GAS, gas) if GAS in t.model_fields_set else (MICRO, micro)
        raise ValueError(f"train_batch_size ({total}) is not a whole multiple of {key} x {ranks} ({known} x {dp} = {known * dp})")

    def parallelism(self, gpus_per_node: int | None, hardware: str) -> Parallelism:
        """The GPUs spread over nodes by the rule every command uses (memory.setup.spread_gpus)."""
        par = spread_gpus(self.gpus, self.nodes, gpus_per_node, hardware)
        if self.topology is Topology.multinode and par.nodes == 1:
            raise ZeroplanError(f"topology multinode needs nodes > 1 ({self.gpus} GPUs fit one {hardware} node)")
        return par

    def batch(self, open_micro: int | None = None, open_gas: int | None = None) -> tuple[int, int]:
        """(micro-batch, accumulation): what the plan states or implies, else open_micro/open_gas (the config's), else 1.

        DeepSpeed's identity, train_batch_size = micro x accumulation x dp_world, fills the one that a stated
        train_batch_size implies (floor division, like DeepSpeed; the checks report a remainder).
        """
        t, dp = self.training, self.data_parallel
        stated, total = t.model_fields_set, t.train_batch_size
        micro = t.train_micro_batch_size_per_gpu if MICRO in stated else None
        gas = t.gradient_accumulation_steps
        if micro is None and total and gas:
            micro = total // (gas * dp)
        micro = micro or open_micro or 1
        if gas is None and total:
            gas = total // (micro * dp)
        return micro, gas or open_gas or 1

    def setup(self, micro_batch: int | None = None, grad_accum: int | None = None) -> TrainingSetup:
        """The training setup the plan states (defaults for the rest), with the batch given if any."""
        t = self.training
        micro, gas = self.batch()
        checkpointing, every = parse_checkpointing(t.checkpointing)
        return TrainingSetup(
            precision=t.precision, optimizer=t.optimizer, optimizer_impl=t.optimizer_impl, seq_len=t.seq_len, micro_batch=micro_batch or micro,
            grad_accum=grad_accum or gas, checkpointing=checkpointing, checkpoint_every=every, attention=t.attention,
            loss=t.loss, post_training=t.post_training, training_loop=self.training_loop(), compile=t.compile, float8=t.float8,
        )  # fmt: skip

    def training_loop(self) -> TrainingLoop:
        """The plan's training loop, or the one its finetune block's 4-bit stack implies (TrainingLoop.of)."""
        tune = self.finetune or {}
        four_bit = str(tune.get("quant", "none")) in ("nf4", "fp4")  # memory.quant.Quant's 4-bit formats
        return TrainingLoop.of(self.training.training_loop, four_bit, str(tune.get("qlora_stack", "peft")))

    def topology_for(self, nodes: int, intra_node_fabric: str | None) -> Topology:
        """nodes > 1: multinode; else pcie when the plan or the hardware says so; else nvlink."""
        if nodes > 1:
            return Topology.multinode
        if self.topology is Topology.pcie or intra_node_fabric == "pcie":
            return Topology.pcie
        return Topology.nvlink


_FSDP_KEY = {Engine.fsdp: "sharding_strategy", Engine.fsdp2: "reshard_after_forward"}
