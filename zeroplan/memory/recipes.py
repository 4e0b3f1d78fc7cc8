"""Byte recipes: bytes per parameter for parameters, gradients and optimizer states.

A recipe is precision x optimizer (+ fp32 gradient accumulation). Pure; no I/O.
Sources: ZeRO paper (Rajbhandari et al. 2019, arXiv:1910.02054) section 3.1; EleutherAI
"Transformer Math 101"; bitsandbytes (Dettmers et al. 2021); Lion (Chen et al. 2023);
Adafactor (Shazeer & Stern 2018); the source article (pure bf16 AdamW).
"""

from dataclasses import dataclass

from zeroplan.memory.setup import Optimizer, OptimizerImpl, Precision

BF16_BYTES = 2  # bfloat16 / float16 element
FP32_BYTES = 4  # float32 element
INT8_BYTES = 1  # 8-bit optimizer state element (bitsandbytes blockwise quantization)

FP32_MASTER_BYTES = FP32_BYTES  # fp32 master copy of the weights in mixed precision (ZeRO paper's K includes it)
FP32_GRAD_ACCUM_BYTES = FP32_BYTES  # extra fp32 gradient buffer when grad_accum_dtype=fp32 (Ultra-Scale Playbook: 16N -> 20N)


# Per-parameter optimizer state tensors, beside any master copy.
OPTIMIZER_STATES_PER_PARAM = {
    Optimizer.adamw: 2,  # m and v (Loshchilov & Hutter 2019)
    Optimizer.adamw_8bit: 2,  # m and v, quantized to 8 bits (Dettmers et al. 2021)
    Optimizer.paged_adamw: 2,  # m and v, fp32, paged (bitsandbytes optim/adamw.py PagedAdamW32bit)
    Optimizer.paged_adamw_8bit: 2,  # m and v, 8-bit, paged (PagedAdamW8bit)
    Optimizer.sgd_momentum: 1,  # momentum buffer
    Optimizer.sgd: 0,  # stateless
    Optimizer.lion: 1,  # one momentum (Chen et al. 2023)
    # Adafactor keeps factored row/column second moments, O(rows + cols) per matrix, and no first moment
    # with the default beta1=None (Shazeer & Stern 2018): 0 bytes per parameter to within 0.1 %.
    Optimizer.adafactor: 0,
}

MIXED = (Precision.bf16_mixed, Precision.fp16_mixed)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """Bytes per parameter of each model state; the ZeRO paper's (2, 2, K) generalised."""

    name: str  # precision/optimizer, e.g. bf16-mixed/adamw
    precision: Precision
    optimizer: Optimizer
    fp32_grad_accum: bool = False
    param_bytes: int  # p: bytes per parameter of the working weights
    grad_bytes: int  # g: bytes per parameter of gradients (incl. an fp32 accumulation buffer)
    optimizer_bytes: int  # k: bytes per parameter of optimizer states incl. any fp32 master
    master_bytes: int  # part of k that is the fp32 master copy (0 without one)
    state_bytes: int  # bytes of one optimizer state element
    optimizer_impl: OptimizerImpl | None = None  # the step's implementation; None: the stack's default

    @property
    def total_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes

    @property
    def has_master(self) -> bool:
        return self.master_bytes > 0

    def describe(self) -> str:
        return (
            f"{self.name}: {self.param_bytes} B params + {self.grad_bytes} B grads + "
            f"{self.optimizer_bytes} B optimizer states = {self.total_bytes} B/param"
        )


def _state_element_bytes(precision: Precision, optimizer: Optimizer) -> int:
    if optimizer in (Optimizer.adamw_8bit, Optimizer.paged_adamw_8bit):
        return INT8_BYTES
    return BF16_BYTES if precision is Precision.bf16_true else FP32_BYTES


def make_recipe(precision: Precision, optimizer: Optimizer, fp32_grad_accum: bool = False,
                optimizer_impl: OptimizerImpl | None = None) -> Recipe:
    """The (p, g, k) recipe for a precision and optimizer.

    p = element size of the working weights; g = same, plus 4 B with fp32 gradient accumulation;
    k = fp32 master (mixed precision only) + states x state element size.
    Mixed AdamW gives (2, 2, 12), the ZeRO paper's K = 12; bf16-true AdamW gives (2, 2, 4), the article's.
    """
    working = FP32_BYTES if precision is Precision.fp32 else BF16_BYTES
    master = FP32_MASTER_BYTES if precision in MIXED else 0
    state = _state_element_bytes(precision, optimizer)
    accum = FP32_GRAD_ACCUM_BYTES if fp32_grad_accum and working != FP32_BYTES else 0
    return Recipe(
        name=f"{precision.value}/{optimizer.value}" + ("+fp32-grad-accum" if accum else ""),
        precision=precision,
        optimizer=optimizer,
        fp32_grad_accum=bool(accum),
        param_bytes=working,
        grad_bytes=working + accum,
        optimizer_bytes=master + OPTIMIZER_STATES_PER_PARAM[optimizer] * state,
        master_bytes=master,
        state_bytes=state,
        optimizer_impl=optimizer_impl,
    )
