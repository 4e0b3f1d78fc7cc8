"""The optimizer a DeepSpeed config builds (`optimizer.type`), as the byte recipe zeroplan sizes, and the ZeRO
features an estimate does not model. Pure: no I/O.

deepspeed==0.19.8:deepspeed/runtime/engine.py _configure_basic_optimizer: Adam and AdamW build FusedAdam (adam_w_mode
only changes the update; DeepSpeedCPUAdam with optimizer offload), Lion FusedLion (one fp32 moment), any other name
torch.optim's class of that name (SGD: a momentum buffer when params.momentum > 0). The 1-bit and 0/1 optimizers keep
error-feedback buffers beside their moments, Lamb and Adagrad their own states, Muon its momentum and an Adam for the
rest: none is modelled; a typed --optimizer overrides the file's, as it does any key.
"""

from __future__ import annotations

from collections.abc import Mapping

from zeroplan.memory.setup import Optimizer

ADAM = ("adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam", "torch_adam", "adam_w")
NOT_MODELLED = {"onebitadam": "1-bit Adam: error-feedback buffers beside its moments",
                "zerooneadam": "0/1 Adam: error-feedback buffers beside its moments",
                "onebitlamb": "1-bit LAMB: error-feedback buffers and scaling coefficients",
                "lamb": "LAMB (FusedLamb)", "adagrad": "Adagrad", "muon": "Muon (momentum for matrices, Adam for the rest)",
                "muadam": "MuAdam (mup)", "muadamw": "MuAdamW (mup)", "musgd": "MuSGD (mup)"}  # fmt: skip


def optimizer_of(data: object) -> Optimizer | None:
    """The recipe `optimizer.type` builds, or None (no optimizer block: the client's; or one not modelled)."""
    block = data.get("optimizer") if isinstance(data, Mapping) else None
    kind = block.get("type") if isinstance(block, Mapping) else None
    if not isinstance(kind, str):
        return None
    name = kind.lower()
    if name in ADAM:
        return Optimizer.adamw
    if name in ("lion", "fusedlion"):
        return Optimizer.lion
    if name == "sgd":
        params = block.get("params") if isinstance(block.get("params"), Mapping) else {}
        momentum = params.get("momentum", 0)
        return Optimizer.sgd_momentum if isinstance(momentum, (int, float)) and momentum > 0 else Optimizer.sgd
    return None


def not_modelled(data: object, given: frozenset[str]) -> list[str]:
    """What the config asks that an estimate does not model, each as `key: value (what)`; [] when all is."""
    if not isinstance(data, Mapping):
        return []
    problems = []
    block = data.get("optimizer")
    kind = block.get("type") if isinstance(block, Mapping) else None
    if isinstance(kind, str) and optimizer_of(data) is None and "optimizer" not in given:
        what = NOT_MODELLED.get(kind.lower(), "an optimizer zeroplan has no byte recipe for")
        problems.append(f"optimizer.type: {kind} ({what}) is not modelled yet; --optimizer sizes it as another")
    zero = data.get("zero_optimization")
    zenflow = zero.get("zenflow") if isinstance(zero, Mapping) else None
    if isinstance(zenflow, Mapping) and zenflow:
        problems.append("zero_optimization.zenflow: (set) (ZenFlow: the top-k gradient columns updated on the GPU "
                        "beside the offloaded optimizer) is not modelled yet")
    return problems
