"""What PyTorch engines keep per parameter between steps, from zeroplan's byte recipes.

PyTorch mixed precision (torch.autocast for DDP, FSDP `MixedPrecision` / FSDP2 `MixedPrecisionPolicy`)
keeps the parameters in fp32 and casts them for compute: the fp32 parameter is the master copy, gradients
land in fp32 (FSDP casts the reduced shard back to the parameter dtype), and no 16-bit copy persists.
Pure: no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from zeroplan.memory.recipes import FP32_BYTES, Recipe


class Storage(NamedTuple):
    """Bytes per parameter PyTorch holds: parameters, gradients, optimizer states; and the compute element size."""

    param: int
    grad: int
    optimizer: int
    compute: int  # element size of gathered parameters and reduced gradients (param_dtype)


def torch_storage(recipe: Recipe) -> Storage:
    """(p, g, k) as PyTorch stores them.

    mixed: p = 4 (fp32 parameters are the master), g = 4 (fp32 gradients), k = recipe k - 4 (no separate master);
    otherwise the recipe's own (p, g, k). compute = the recipe's p (2 B in mixed precision).
    bf16-mixed AdamW: (4, 4, 8) = 16 B, the same sum as DeepSpeed's (2, 2, 12), split differently.
    """
    if recipe.has_master:
        return Storage(FP32_BYTES, FP32_BYTES, recipe.optimizer_bytes - recipe.master_bytes, recipe.param_bytes)
    return Storage(recipe.param_bytes, recipe.grad_bytes, recipe.optimizer_bytes, recipe.param_bytes)
