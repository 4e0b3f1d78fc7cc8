"""DeepSpeed's batch-size rule: any two of train_batch_size, micro-batch and accumulation give the third.

Source: DeepSpeed v0.19.8 `deepspeed/runtime/config.py` `_set_batch_related_parameters`
and `_batch_assertion`.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")


@dataclass(frozen=True)
class BatchTriple:
    """train_batch_size, micro batch and accumulation after DeepSpeed fills in what is missing."""

    train_batch: int
    micro_batch: int
    grad_acc: int
    derived: str | None = None  # the key DeepSpeed computed by floor division, if any
    numerator: int = 0  # ... whose exact value is numerator / denominator
    denominator: int = 1
    formula: str = ""

    def derivation(self) -> str:
        """'; key = a / (b * c) = 41.67 is not a whole number and DeepSpeed floors it to 41', or ''."""
        if not self.derived or self.numerator % self.denominator == 0:
            return ""
        exact, floored = self.numerator / self.denominator, self.numerator // self.denominator
        return f"; {self.derived} = {self.formula} = {exact:.4g} is not a whole number and DeepSpeed floors it to {floored}"


def derive_batch(tbs: int | None, mbs: int | None, gas: int | None, world: int) -> BatchTriple | None:
    """DeepSpeed's `_set_batch_related_parameters` (runtime/config.py): any two give the third, by floor division.

    Only train_batch_size: gas = 1, micro = tbs // world. Only micro: gas = 1, tbs = micro * world.
    Neither of the two: None (DeepSpeed asserts 'Either train_batch_size or
    train_micro_batch_size_per_gpu needs to be provided').
    """
    if tbs is not None and mbs is not None and gas is not None:
        return BatchTriple(tbs, mbs, gas)
    if tbs is not None and mbs is not None:
        formula = f"{tbs} / ({mbs} * {world})"
        return BatchTriple(tbs, mbs, tbs // mbs // world, "gradient_accumulation_steps", tbs, mbs * world, formula)
    if tbs is not None:
        gas = 1 if gas is None else gas
        formula = f"{tbs} / ({world} * {gas})"
        return BatchTriple(tbs, tbs // world // gas, gas, "train_micro_batch_size_per_gpu", tbs, world * gas, formula)
    if mbs is not None:
        gas = 1 if gas is None else gas
        return BatchTriple(mbs * gas * world, mbs, gas)
    return None
