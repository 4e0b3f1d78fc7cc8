"""DeepSpeed's estimator functions reproduced to the byte (DeepSpeed's and transformers' printed tables; docs/deepspeed.md)."""

import pytest

from zeroplan.deepspeed.estimator import (
    estimate_deepspeed,
    zero2_model_states,
    zero3_model_states,
)

GIB = 2**30


def printed(rows):
    """Rows as DeepSpeed prints them: (cpu, gpu) in 2^30 units, 2 decimals."""
    return [(f"{r.cpu_bytes / GIB:.2f}", f"{r.gpu_bytes / GIB:.2f}") for r in rows]


CASES = {
    # memory.rst t5-3b live model, 1 node x 8 GPUs (ZeRO-3 rows as printed; ZeRO-2 with the current formula)
    "deepspeed-docs-t5-3b-live-8gpu": (2_851_598_336, 32_899_072, 8, 1,
        [("127.48", "5.31"), ("127.48", "11.29")],
        [("71.71", "0.12"), ("127.48", "0.12"), ("63.74", "0.79"), ("127.48", "0.79"), ("1.47", "6.10"), ("127.48", "6.10")]),
    # memory.rst t5-3b cold, total_params=2851e6, largest_layer_params=32e6
    "deepspeed-docs-t5-3b-cold-8gpu": (2_851_000_000, 32_000_000, 8, 1,
        [("127.45", "5.31"), ("127.45", "11.28")],
        [("71.69", "0.12"), ("127.45", "0.12"), ("63.72", "0.78"), ("127.45", "0.78"), ("1.43", "6.09"), ("127.45", "6.09")]),
    # transformers docs, bigscience/T0_3B (AutoModel), 1 node x 1 GPU
    "transformers-docs-T0_3B-1gpu": (2_783_959_040, 65_798_144, 1, 1, None,
        [("70.00", "0.25"), ("70.00", "0.25"), ("62.23", "5.43"), ("62.23", "5.43"), ("0.37", "46.91"), ("15.56", "46.91")]),
    # older transformers docs, T0_3B, 1 node x 2 GPUs
    "transformers-docs-T0_3B-2gpu": (2_783_959_040, 65_798_144, 2, 1, None,
        [("70.00", "0.25"), ("70.00", "0.25"), ("62.23", "2.84"), ("62.23", "2.84"), ("0.74", "23.58"), ("31.11", "23.58")]),
    # meta-llama/Llama-2-7b-hf, 1 node x 4 GPUs (third-party print)
    "llama-2-7b-4gpu": (6_738_415_616, 131_072_000, 4, 1, None,
        [("169.44", "0.49"), ("169.44", "0.49"), ("150.62", "3.63"), ("150.62", "3.63"), ("2.93", "28.73"), ("150.62", "28.73")]),
    # t5-small, 1 GPU (CSDN blog print)
    "t5-small-1gpu": (60_506_624, 16_449_536, 1, 1, None,
        [("1.52", "0.06"), ("1.52", "0.06"), ("1.35", "0.17"), ("1.35", "0.17"), ("0.09", "1.08"), ("0.34", "1.08")]),
    # multi-node regression vector (computed from DeepSpeed v0.19.6's formulas, not a print)
    "multinode-2x8": (2_851_000_000, 32_000_000, 8, 2,
        [("254.90", "5.31"), ("127.45", "8.30")],
        [("35.85", "0.12"), ("127.45", "0.12"), ("31.86", "0.45"), ("127.45", "0.45"), ("1.43", "3.11"), ("127.45", "3.11")]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_printed_tables(case):
    params, largest, gpn, nodes, zero2, zero3 = CASES[case]
    ds = estimate_deepspeed(params, largest, gpn, nodes)
    if zero2 is not None:
        assert printed(ds.zero2) == zero2
    assert printed(ds.zero3) == zero3


def test_docs_stale_zero2_row_is_the_pre_5099_formula():
    # memory.rst still prints 15.93 GB: 4 P + 16 P / T, the formula before PR #5099 (v0.14.3).
    params = 2_851_000_000
    old = 4 * params + int(16 * params / 8)
    assert f"{old / GIB:.2f}" == "15.93"
    assert f"{zero2_model_states(params, 8, 1, cpu_offload=False)[1] / GIB:.2f}" == "11.28"


def test_t5_large_hand_calc_in_mib():
    # memory.rst t5-large, 4 GPUs: 737.67M params, 32.90M largest layer -> 3291 / 125 / 477 MB (>>20)
    p, l = 737_668_096, 32_899_072
    rows = {(o, po): zero3_model_states(p, l, 4, 1, o, po)[1] >> 20 for o, po in ((False, False), (True, True), (True, False))}
    assert rows == {(False, False): 3291, (True, True): 125, (True, False): 477}


def test_row_order_and_options_match_deepspeed():
    ds = estimate_deepspeed(10**9, 10**7, 8, 1)
    assert [(r.offload_param, r.offload_optimizer, r.zero_init) for r in ds.zero3] == [
        ("cpu", "cpu", True), ("cpu", "cpu", False), ("none", "cpu", True), ("none", "cpu", False),
        ("none", "none", True), ("none", "none", False),
    ]
    assert [r.offload_optimizer for r in ds.zero2] == ["cpu", "none"]
    assert all(isinstance(r.cpu_bytes, int) and isinstance(r.gpu_bytes, int) for r in ds.zero2 + ds.zero3)
