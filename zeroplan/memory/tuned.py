"""Model states of a fine-tune (memory.finetune's Tuning) under each ZeRO stage and engine.

    trainable T elements: the recipe's (p, g, k), sharded by the stage as for full training
    frozen floating-point F elements: parameters only, no gradient, no optimizer state
    quantized weights: their packed bytes (parameters), and their QuantState beside them (kept whole)

How the stacks treat frozen parameters (sources: DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641, PyTorch 2.13):
  DeepSpeed ZeRO-1/2: only requires_grad parameters enter the optimizer's flat fp32 groups
    (deepspeed/runtime/zero/stage_1_and_2.py:379-381, `trainable_parameters`); frozen ones stay replicated
    module parameters. ZeRO-3 partitions every parameter (runtime/zero/partition_parameters.py) and gathers
    frozen ones per layer like any other; fp32 partitions and gradients exist for trainable ones only
    (runtime/zero/stage3.py:677-684, `_get_trainable_parameter_groups`). With bf16/fp16 DeepSpeed casts every
    floating-point parameter to the 16-bit dtype (runtime/engine.py:1543-1544, `_cast_module_mixed_precision`),
    adapters included (p = 2 B, the fp32 master in the optimizer); a uint8 4-bit weight is not cast.
  PyTorch engines: peft keeps adapters fp32 on a 16-bit base (autocast_adapter_dtype=True, peft
    tuners/tuners_utils.py cast_adapter_dtype) and FSDP/DDP keep them fp32 (memory/engines/storage.py); the
    base stays 16-bit. FSDP1 with use_orig_params=True may mix frozen and trainable parameters in one unit
    "but it's recommended to avoid doing so to prevent higher than expected gradient memory usage"
    (torch/distributed/fsdp/fully_sharded_data_parallel.py, FullyShardedDataParallel docstring): its flat
    gradient covers the whole unit, which zeroplan counts. peft's fsdp_auto_wrap_policy (peft utils/other.py)
    wraps adapter layers as units of their own, so under LoRA only adapters carry gradients. FSDP2 shards per
    parameter: a frozen parameter has no gradient.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.errors import ZeroplanError
from zeroplan.memory.adapters import adapter_note, adapter_storage, frozen_element, qlora_path_note
from zeroplan.memory.finetune import AdaptedParam, Tuning
from zeroplan.memory.quant import QloraStack, Quant
from zeroplan.memory.recipes import FP32_BYTES, INT8_BYTES, Recipe
from zeroplan.memory.setup import (
    AdapterWrap,
    DeepSpeedKnobs,
    Engine,
    EngineOptions,
    OffloadDevice,
    Optimizer,
    Parallelism,
    Precision,
    ZeroStage,
)
from zeroplan.memory.stage import StageBase, buffer_bytes_by_phase, phase_totals, stage_base
from zeroplan.memory.states import ModelStates, ModelSummary, cpu_offload_terms
from zeroplan.memory.terms import Term, shard_numel

BNB_OPTIM_BLOCKSIZE = 256  # bitsandbytes optim/optimizer.py Optimizer2State.init_state: blocksize = 256
BNB_MIN_8BIT_SIZE = 4096  # min_8bit_size default: smaller tensors keep fp32 states
ADAM_STATES = 2  # m and v
EIGHT_BIT = (Optimizer.adamw_8bit, Optimizer.paged_adamw_8bit)


def bnb_8bit_state_bytes(numels: tuple[int, ...] | list[int]) -> int:
    """bitsandbytes AdamW8bit states of these tensors (optim/optimizer.py Optimizer2State.init_state):

        n >= 4096: 2 (n uint8 + 4 ceil(n / 256) fp32 absmax)      n < 4096: 2 x 4 n (fp32 states)
    The two 256-entry quantization maps are shared by all tensors (name2qmap) and left out.
    """
    total = 0
    for n in numels:
        if n < BNB_MIN_8BIT_SIZE:
            total += ADAM_STATES * FP32_BYTES * n
        else:
            total += ADAM_STATES * (n * INT8_BYTES + -(-n // BNB_OPTIM_BLOCKSIZE) * FP32_BYTES)
    return total


def frozen_param_bytes(tuning: Tuning, element: int) -> int:
    """Frozen floating-point tensors at `element` bytes plus the packed quantized weights."""
    return tuning.frozen_float_numel * element + tuning.packed_bytes


def check_quant_engine(tuning: Tuning, recipe: Recipe, engine: Engine, stage: ZeroStage) -> None:
    """QLoRA where parameters are flattened and sharded (ZeRO-3, FSDP) needs quant_storage = the compute dtype.

    FSDP and ZeRO-3 flatten a unit's parameters into one tensor of one dtype, so the packed 4-bit weights must be
    stored in the dtype of the rest (transformers docs, "bitsandbytes" / peft docs "Use PEFT QLoRA and FSDP" and
    "...DeepSpeed ZeRO3": bnb_4bit_quant_storage=torch.bfloat16). 8-bit base weights under sharding: not modelled.
    """
    spec = tuning.spec
    sharded = (engine is Engine.deepspeed and stage is ZeroStage.zero3) or engine in (Engine.fsdp, Engine.fsdp2)
    if not sharded or spec.quant is Quant.none or spec.qlora_stack is QloraStack.torchtune:
        # torchao's NF4Tensor shards and all-gathers itself under FSDP2 (torchao==0.18.0:quantization/quantize_/
        # workflows/nf4/nf4_tensor.py fsdp_pre_all_gather / fsdp_post_all_gather): no storage dtype to match
        return
    where = "ZeRO-3" if engine is Engine.deepspeed else f"--engine {engine.value}"
    if spec.quant in (Quant.int8, Quant.fp8):
        what = "an 8-bit (LLM.int8)" if spec.quant is Quant.int8 else "an FP8 checkpoint's"
        raise ZeroplanError(f"{what} base under {where} is not modelled: use ZeRO-0/1/2 or ddp")
    compute = {2: {Precision.fp16_mixed: "float16"}.get(recipe.precision, "bfloat16"), 4: "float32"}[recipe.param_bytes]
    if spec.quant_storage.value != compute:
        raise ZeroplanError(f"--quant-storage {spec.quant_storage.value} under {where}: QLoRA there needs the packed "
                            f"weights stored in the compute dtype, --quant-storage {compute}")


def check_optimizer_in_backward(tuning: Tuning, engine: Engine, dp: int, grad_accum: int) -> None:
    """torchtune runs the optimizer in backward on one device or under FSDP2, without gradient accumulation
    (torchtune recipes/full_finetune_distributed.py: optimizer_in_bwd with gradient_accumulation_steps > 1 raises)."""
    if not tuning.spec.optimizer_in_backward:
        return
    if engine is Engine.deepspeed or engine is Engine.fsdp or (engine is Engine.ddp and dp > 1):
        raise ZeroplanError(f"--optimizer-in-backward with --engine {engine.value}"
                            + (f" on {dp} GPUs" if engine is Engine.ddp else "")
                            + ": torchtune offers it on one GPU or under FSDP2 (--engine fsdp2)")
    if grad_accum > 1:
        raise ZeroplanError(f"--optimizer-in-backward with --grad-accum {grad_accum}: a gradient is freed at its "
                            "step, so it cannot accumulate (torchtune refuses it)")


def _optimizer_bytes(tuning: Tuning, recipe: Recipe, numels: list[int] | tuple[int, ...], master: int) -> int:
    """Optimizer states of these trainable tensors: exact per-tensor bytes for AdamW8bit, else k' per element."""
    count = sum(numels)
    if recipe.optimizer in EIGHT_BIT:
        return count * master + bnb_8bit_state_bytes(numels)
    return count * (recipe.optimizer_bytes - recipe.master_bytes + master)


def deepspeed_tuned_base(model: ModelSummary, tuning: Tuning, recipe: Recipe, stage: ZeroStage, par: Parallelism,
                         knobs: DeepSpeedKnobs) -> StageBase:
    """stage_base over the trainable parameters, plus the frozen ones as parameters (partitioned at ZeRO-3).

    DeepSpeed hands its optimizer one flat fp32 partition per group, so AdamW8bit sees one tensor of T / N_d.
    Buffers: gradient buckets over T; ZeRO-3's gathered layer over the model's largest layer, as before.
    """
    trainable = tuning.num_trainable
    base = stage_base(replace(model, num_params=trainable), recipe, stage, par, knobs)
    opt_numel = shard_numel(trainable, par.dp) if stage >= ZeroStage.zero1 else trainable
    states = base.states
    if recipe.optimizer in EIGHT_BIT and states.optimizer_states:
        states = replace(states, optimizer_states=_optimizer_bytes(tuning, recipe, [opt_numel], recipe.master_bytes))
    frozen = frozen_param_bytes(tuning, recipe.param_bytes)
    if stage is ZeroStage.zero3:
        frozen = shard_numel(frozen, par.dp)
    params, cpu, nvme = states.parameters + tuning.quant_state_bytes, states.cpu_bytes, 0
    offload = base.knobs.offload_param
    if stage is ZeroStage.zero3 and offload is not OffloadDevice.none:  # frozen partitions go where the rest go
        cpu += frozen if offload is OffloadDevice.cpu else 0
        nvme = frozen if offload is OffloadDevice.nvme else 0
    else:
        params += frozen
    states = replace(states, parameters=params, cpu_bytes=cpu)
    backward, step = phase_totals(states, base.buffers)
    return replace(base, states=states, backward_bytes=backward, step_bytes=step,
                   cpu_terms=cpu_offload_terms(states, trainable, recipe, par.dp, base.knobs),
                   nvme_bytes_per_node=base.nvme_bytes_per_node + nvme * par.gpus_per_node)


def _sharded(engine: Engine, stage: ZeroStage, dp: int) -> bool:
    return dp > 1 and (engine is Engine.fsdp2 or (engine is Engine.fsdp and stage >= ZeroStage.zero2))


def _states_per_param(recipe: Recipe) -> int:
    from zeroplan.memory.recipes import OPTIMIZER_STATES_PER_PARAM

    return OPTIMIZER_STATES_PER_PARAM[recipe.optimizer]


def _opt_numels(tuning: Tuning, engine: Engine, stage: ZeroStage, dp: int, sharded: bool) -> list[int]:
    """The tensors the optimizer holds on one rank: FSDP2 and DDP per tensor, FSDP1 one flat shard."""
    if engine is Engine.ddp and stage is ZeroStage.zero1 and dp > 1:
        from zeroplan.memory.engines.ddp import greedy_partition

        return [max(greedy_partition(list(tuning.trainable), dp))]  # ZeroRedundancyOptimizer's busiest rank
    if engine is Engine.fsdp:
        return [shard_numel(tuning.num_trainable, dp) if sharded else tuning.num_trainable]
    return [shard_numel(n, dp) if sharded else n for n in tuning.trainable]


def _grad_units(tuning: Tuning, engine: Engine, options: EngineOptions) -> list[int]:
    """Elements carrying a gradient per unit: FSDP1 under --freeze, or with LoRA adapters inside their block's unit
    (--adapter-wrap block), gives a mixed unit a gradient for all of it."""
    if engine is Engine.fsdp and (not tuning.spec.lora_rank or options.adapter_wrap is AdapterWrap.block):
        return [t + f if t else 0 for t, f in zip(tuning.trainable_by_unit, tuning.frozen_by_unit)]
    return list(tuning.trainable_by_unit)


def engine_tuned_base(engine: Engine, model: ModelSummary, layout, tuning: Tuning, recipe: Recipe, stage: ZeroStage,
                      par: Parallelism, knobs: DeepSpeedKnobs, options: EngineOptions,
                      accumulating: bool = False) -> StageBase:
    """The engine's StageBase with the fine-tune's states; gathered-parameter lines scaled to the stored bytes."""
    from zeroplan.memory.engines import ADAMW_TEMPORARY, adamw_foreach_temporary, engine_stage_base
    from zeroplan.memory.engines.grads import NO_SYNC, fsdp_tuned_moments, no_sync_element, no_sync_numel
    from zeroplan.memory.engines.ddp import ddp_buffers
    from zeroplan.memory.engines.fsdp import PARAM_TERMS
    from zeroplan.memory.engines.storage import torch_storage

    full = engine_stage_base(engine, model, layout, recipe, stage, par, knobs, options, accumulating)
    store, dp = torch_storage(recipe), par.dp
    sharded = _sharded(engine, stage, dp)
    per = (lambda n: shard_numel(n, dp)) if sharded else (lambda n: n)
    grad_units = _grad_units(tuning, engine, options)
    # Adapters inside their block's FlatParameter take its one dtype (torch/distributed/fsdp/_flat_param.py: "Must
    # flatten tensors with uniform dtype"): the engine's storage for the adapters and the frozen weights alike.
    in_blocks = engine is Engine.fsdp and options.adapter_wrap is AdapterWrap.block
    ad = adapter_storage(recipe, store, tuning.spec.adapter_fp32) if tuning.spec.lora_rank and not in_blocks else store
    frozen = frozen_param_bytes(tuning, store.param if in_blocks else frozen_element(tuning, store, engine))
    saved = per(tuning.saved_numel)  # modules_to_save copies: base dtype, AdamW states in it too
    adapters = per(tuning.num_trainable - tuning.saved_numel)
    extra_grad = per(sum(grad_units)) - per(tuning.num_trainable)  # FSDP1 mixed units under --freeze
    params = adapters * ad.param + saved * store.compute + (shard_numel(frozen, dp) if sharded else frozen)
    grads = (adapters + extra_grad) * ad.grad + saved * store.compute
    if tuning.spec.optimizer_in_backward:  # one parameter's gradient at a time: the largest (its shard)
        grads = per(max(tuning.trainable)) * ad.grad
    numels = _opt_numels(tuning, engine, stage, dp, sharded)
    if recipe.optimizer in EIGHT_BIT:  # bitsandbytes' 8-bit states do not depend on the parameter's dtype
        opt = _optimizer_bytes(tuning, recipe, numels, 0) - saved * (recipe.optimizer_bytes - recipe.master_bytes)
    else:
        opt = (sum(numels) - saved) * ad.optimizer
    states = ModelStates(
        parameters=params + tuning.quant_state_bytes,
        gradients=grads,
        optimizer_states=opt + saved * _states_per_param(recipe) * store.compute)
    # gathered units hold every parameter at c bytes (mixed precision gathers param_dtype), packed weights as stored
    gathered = (tuning.num_trainable + tuning.frozen_float_numel) * store.compute + tuning.packed_bytes
    ratio = gathered / max(1, tuning.num_params * store.compute)
    buffers: list[Term] = []
    for t in full.buffers:
        if t.name.startswith(PARAM_TERMS):
            buffers.append(replace(t, bytes=int(t.bytes * ratio)))
        elif t.name.startswith("unsharded gradient"):
            buffers.append(replace(t, bytes=max(grad_units) * store.compute))
        elif t.name == NO_SYNC:  # the whole gradients of the units that carry one
            buffers.append(replace(t, bytes=no_sync_numel(engine, [u for u in grad_units if u], dp)
                                   * no_sync_element(engine, store, options)))
        elif t.name.startswith(ADAMW_TEMPORARY):  # of the trainable tensors' states only: foreach's whole group;
            group = adamw_foreach_temporary(recipe, states)  # for-loop's two of the largest, bounded by two groups
            buffers.append(replace(t, bytes=group if "foreach" in t.name else min(t.bytes, 2 * group)))
        elif not t.name.startswith("DDP gradient buckets"):
            buffers.append(t)
    if engine is Engine.ddp:
        buffers += ddp_buffers(sum(grad_units), store, options)
    backward, step = phase_totals(states, tuple(buffers))
    tuned = replace(full, states=states, buffers=tuple(buffers), buffer_bytes=buffer_bytes_by_phase(tuple(buffers)),
                    backward_bytes=backward, step_bytes=step)
    if any(t.name == NO_SYNC for t in buffers) and states != full.states:  # else the engine's own moments
        tuned = replace(tuned, moments=fsdp_tuned_moments(tuned, full.moment_layers))
    return tuned


def wrapped_note(wrapped: tuple[AdaptedParam, ...]) -> str:
    """The MoE parameters peft adapts as parameters, by kind: router weights (2-D) and fused expert tensors (E, ...)."""
    experts = sum(1 for w in wrapped if len(w.shape) == 3)
    kinds = [f"{n} {what}" for n, what in ((len(wrapped) - experts, "router weights"), (experts, "expert tensors")) if n]
    fused = "; rank 2 r on the fused gate_up_proj" if any(w.name.endswith(".gate_up_proj") for w in wrapped) else ""
    return (f"peft adapts {len(wrapped)} MoE parameters ({', '.join(kinds)}) with a ParamWrapper each "
            f"(target_parameters: lora_A r E x in, lora_B out x r E{fused})")


def tuning_notes(tuning: Tuning, engine: Engine, options: EngineOptions = EngineOptions()) -> list[str]:
    """What the estimate assumes about the fine-tune, in words."""
    spec = tuning.spec
    notes = [f"fine-tuning mode {spec.mode}: {tuning.num_trainable:,} of {tuning.num_params:,} parameters train; "
             "frozen ones hold no gradients and no optimizer states (ZeRO-3 and FSDP still shard and gather them)"]
    if spec.lora_rank:
        if tuning.adapted:
            notes.append(f"adapters of rank {spec.lora_rank} on {len(tuning.adapted)} linears (peft: lora_A r x in, "
                         "lora_B out x r" + (", DoRA magnitude out" if spec.dora else "") + ")")
        if tuning.adapted_params:
            notes.append(wrapped_note(tuning.adapted_params))
        notes.append("alpha and rsLoRA change no byte")
        notes.append("adapters in their block's FlatParameter and dtype (FSDP1 ModuleWrapPolicy({Block}), "
                     "use_orig_params=True: litgpt / Lightning Fabric)" if engine is Engine.fsdp
                     and options.adapter_wrap is AdapterWrap.block else adapter_note(tuning, engine))
    if spec.quant.four_bit:
        notes.append(qlora_path_note(tuning, engine))
    if spec.quant.four_bit:
        notes.append(f"base linears in bitsandbytes {spec.quant.value}: packed 4-bit in {spec.quant_storage.value}, "
                     "absmax per 64 elements " + ("8-bit in blocks of 256 (double quant)" if spec.double_quant else "fp32")
                     + "; the QuantState is not a parameter and stays whole on every GPU")
    elif spec.quant is Quant.int8:
        notes.append("base linears in bitsandbytes LLM.int8: int8 weights + fp32 row scales")
    elif spec.quant is Quant.fp8:
        b0, b1 = spec.quant_block
        notes.append(f"base linears as the FP8 checkpoint stores them (transformers' FP8Linear): float8_e4m3fn weights "
                     f"+ fp32 scales per {b0}x{b1} block; the output head in the compute dtype; backward dequantizes one "
                     "weight at a time (docs/finetune.md)")
    if engine is Engine.fsdp and (spec.freeze or (spec.lora_rank and options.adapter_wrap is AdapterWrap.block)):
        notes.append("FSDP1 use_orig_params=True: a unit with any trainable parameter keeps a gradient for all of it")
    notes.append("activations: a saved tensor is kept only for a gradient that is needed (frozen linears keep no "
                 "input, a frozen prefix nothing), adapters add their inputs and rank-r outputs; the step's timeline "
                 "reads each layer's own bytes (docs/finetune.md)")
    return notes
