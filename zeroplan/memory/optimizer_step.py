"""AdamW's step: which implementation runs it (an input, --optimizer-impl) and the GPU temporaries each makes.

PyTorch (torch==2.13.0:torch/optim/adam.py, which torch.optim.AdamW subclasses in torch/optim/adamw.py):
- foreach (_multi_tensor_adam): `exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)` makes one new tensor per
  parameter of the whole group before the in-place div/add/addcdiv: one optimizer state's size of the group at once.
  PyTorch's default on CUDA (torch/optim/optimizer.py _default_to_fused_or_foreach: fused only when asked, foreach
  for CUDA tensors).
- fused (_fused_adam, torch._fused_adamw_): one CUDA kernel in place; no temporary.
- for-loop (_single_tensor_adam): `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` per tensor: the
  sqrt and the quotient are both alive for a moment, two of the largest tensor's state.
DeepSpeed 0.19.8 (deepspeed==0.19.8:deepspeed/runtime/engine.py get_optimizer_configuration): FusedAdam
(ops/adam/fused_adam.py, multi_tensor_applier in place: no temporary) unless the optimizer is offloaded, then
DeepSpeedCPUAdam (ops/adam/cpu_adam.py, on the host); `torch_adam: true` runs torch.optim.AdamW(foreach=...) over
ZeRO's flat fp32 partition (stages 0-2: one flat tensor per group) or, at stage 3, one sub-group at a time
(sub_group_size): foreach and for-loop then make one, resp. two, temporaries of that flat tensor's state.
Only AdamW's variants make these; other optimizers: none counted. Pure.
"""

from __future__ import annotations

from math import prod

from zeroplan.memory.recipes import Recipe
from zeroplan.memory.setup import DeepSpeedKnobs, Engine, OffloadDevice, Optimizer, OptimizerImpl, ZeroStage
from zeroplan.memory.terms import Phase, Term, shard_numel

TORCH_SOURCE = "torch==2.13.0:torch/optim/adam.py"
DEEPSPEED_SOURCE = "deepspeed==0.19.8:deepspeed/runtime/engine.py get_optimizer_configuration"
# Temporaries of one state's size alive at once, per implementation (module docstring).
TEMPORARIES = {OptimizerImpl.foreach: 1, OptimizerImpl.fused: 0, OptimizerImpl.for_loop: 2}
TERM_NAME = {OptimizerImpl.foreach: "AdamW foreach temporary (sqrt of exp_avg_sq)",
             OptimizerImpl.for_loop: "AdamW for-loop temporary (sqrt and quotient of the largest tensor's exp_avg_sq)"}
TERM_SOURCE = {OptimizerImpl.foreach: f"{TORCH_SOURCE} _multi_tensor_adam: torch._foreach_sqrt(device_exp_avg_sqs)",
               OptimizerImpl.for_loop: f"{TORCH_SOURCE} _single_tensor_adam: (exp_avg_sq.sqrt() / "
                                       "bias_correction2_sqrt).add_(eps)"}


def default_impl(engine: Engine) -> OptimizerImpl:
    """The stack's own choice: PyTorch's foreach on CUDA; DeepSpeed's FusedAdam (CPUAdam when offloaded)."""
    return OptimizerImpl.fused if Engine(engine) is Engine.deepspeed else OptimizerImpl.foreach


def impl_of(recipe: Recipe, engine: Engine) -> OptimizerImpl:
    return recipe.optimizer_impl or default_impl(engine)


def describe(recipe: Recipe, engine: Engine, offload: bool = False) -> str:
    """The implementation in the stack's words, for the output's notes."""
    impl, given = impl_of(recipe, engine), recipe.optimizer_impl is not None
    how = "as given (--optimizer-impl)" if given else "the stack's default"
    if recipe.optimizer is not Optimizer.adamw:
        return f"optimizer {recipe.optimizer.value}: its own step (--optimizer-impl applies to AdamW)"
    if Engine(engine) is Engine.deepspeed:
        if impl is OptimizerImpl.fused:
            kernel = "DeepSpeedCPUAdam on the host" if offload else "DeepSpeed FusedAdam on the GPU"
            return f"AdamW step: {kernel}, {how} ({DEEPSPEED_SOURCE})"
        return (f"AdamW step: torch.optim.AdamW(foreach={impl is OptimizerImpl.foreach}) via torch_adam: true, "
                f"{how} ({DEEPSPEED_SOURCE})")
    arg = {OptimizerImpl.foreach: "foreach=True", OptimizerImpl.fused: "fused=True",
           OptimizerImpl.for_loop: "foreach=False"}[impl]
    return f"AdamW step: torch.optim.AdamW({arg}), {how} ({TORCH_SOURCE})"


def temporary_term(recipe: Recipe, engine: Engine, group_bytes: int, largest_bytes: int) -> tuple[Term, ...]:
    """The step's temporary as a term ((): none): foreach one state of the whole group (`group_bytes`), for-loop two
    of the largest tensor's (`largest_bytes`), fused none; AdamW only."""
    impl = impl_of(recipe, engine)
    if recipe.optimizer is not Optimizer.adamw or not TEMPORARIES[impl]:
        return ()
    size = group_bytes if impl is OptimizerImpl.foreach else TEMPORARIES[impl] * largest_bytes
    return (Term(TERM_NAME[impl], size, Phase.step, TERM_SOURCE[impl]),) if size else ()


def deepspeed_temporary(recipe: Recipe, stage: ZeroStage, num_params: int, dp: int,
                        knobs: DeepSpeedKnobs) -> tuple[Term, ...]:
    """torch_adam under DeepSpeed: the flat fp32 partition (stage 3: one sub-group of it) is the group and its one
    tensor; none with the optimizer offloaded (its step runs on the host) or DeepSpeed's own kernels."""
    if knobs.offload_optimizer is not OffloadDevice.none:
        return ()
    flat = num_params if stage is ZeroStage.zero0 else shard_numel(num_params, dp)
    if stage is ZeroStage.zero3:
        flat = min(flat, knobs.sub_group_size)
    state = flat * recipe.state_bytes
    return temporary_term(recipe, Engine.deepspeed, state, state)


def largest_local(shapes, engine: Engine, dp: int, unit_shards=()) -> int:
    """Elements of the largest tensor the optimizer steps on one rank: FSDP2 a dim-0 shard of one parameter, FSDP1
    a unit's flat shard (`unit_shards`), DDP and no wrapper a whole parameter."""
    if Engine(engine) is Engine.fsdp and unit_shards:
        return max(unit_shards)
    if Engine(engine) is Engine.fsdp2:
        from zeroplan.memory.engines.fsdp import dim0_shard

        return max((dim0_shard(s, dp) for s in shapes), default=0)
    return max((prod(s) for s in shapes), default=0)
