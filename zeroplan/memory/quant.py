"""Bytes of a weight stored by bitsandbytes: 4-bit (NF4/FP4, QLoRA) and 8-bit (LLM.int8), exact per tensor.

Sources, bitsandbytes@95f9af309d4d5793847169c39288dcd3fcbdf564 (github.com/bitsandbytes-foundation/bitsandbytes):
  bitsandbytes/_ops.py:232-235   quantize_4bit: absmax = ceil(n / blocksize) fp32; packed out =
                                 ((n + 1) // (2 itemsize), 1) elements of quant_storage
  bitsandbytes/functional.py:917-951  blocksize 64 by default; compress_statistics (double quantization):
                                 offset = absmax.mean() (one fp32), quantize_blockwise(absmax - offset, blocksize=256)
  bitsandbytes/_ops.py:346-349   quantize_blockwise: one uint8 per element, ceil(n / 256) fp32 absmax
  bitsandbytes/functional.py:826 get_4bit_type: a 16-entry fp32 code per quantized tensor (its QuantState.code)
  bitsandbytes/functional.py:655 the nested code is the module-wide "dynamic" map (256 fp32), shared
  bitsandbytes/_ops.py:97-98     int8_vectorwise_quant: int8 weight, one fp32 scale per row (Int8Params CB, SCB;
                                 nn/modules.py:743)
Pure: no I/O.
"""

from __future__ import annotations

from enum import Enum

from zeroplan.memory.recipes import FP32_BYTES, INT8_BYTES

BNB_4BIT_BLOCKSIZE = 64  # functional.py quantize_4bit: blocksize None -> 64
BNB_NESTED_BLOCKSIZE = 256  # functional.py: double quantization of absmax in blocks of 256
BNB_4BIT_CODE_ENTRIES = 16  # get_4bit_type: the 16 NF4 / FP4 values, fp32
BNB_DYNAMIC_MAP_ENTRIES = 256  # create_dynamic_map(): the nested 8-bit code, one shared tensor


class Quant(str, Enum):
    """How the frozen base linears are stored."""

    none = "none"  # the working dtype (16-bit or fp32)
    nf4 = "nf4"  # bitsandbytes 4-bit NormalFloat (QLoRA, Dettmers et al. 2023)
    fp4 = "fp4"  # bitsandbytes 4-bit float
    int8 = "int8"  # bitsandbytes LLM.int8 (Linear8bitLt, has_fp16_weights=False)

    @property
    def four_bit(self) -> bool:
        return self in (Quant.nf4, Quant.fp4)


class QuantStorage(str, Enum):
    """bnb_4bit_quant_storage: the dtype whose elements hold the packed 4-bit pairs."""

    uint8 = "uint8"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"

    @property
    def itemsize(self) -> int:
        return {"uint8": 1, "bfloat16": 2, "float16": 2, "float32": 4}[self.value]


def packed_4bit_bytes(numel: int, storage: QuantStorage) -> int:
    """The packed weight, a parameter: (n + 1) // (2 s) elements of s bytes (_ops.py:235)."""
    s = storage.itemsize
    return (numel + 1) // (2 * s) * s


def blocks(numel: int, blocksize: int) -> int:
    return -(-numel // blocksize)


def quant_state_4bit_bytes(numel: int, double_quant: bool) -> int:
    """The QuantState beside one packed weight (not a parameter: ZeRO-3 and FSDP leave it whole).

    plain:  4 ceil(n / 64) absmax + 4 x 16 code
    double: ceil(n / 64) uint8 absmax + 4 ceil(ceil(n / 64) / 256) nested absmax + 4 offset + 4 x 16 code
    """
    absmax = blocks(numel, BNB_4BIT_BLOCKSIZE)
    code = BNB_4BIT_CODE_ENTRIES * FP32_BYTES
    if not double_quant:
        return absmax * FP32_BYTES + code
    return absmax * INT8_BYTES + blocks(absmax, BNB_NESTED_BLOCKSIZE) * FP32_BYTES + FP32_BYTES + code


def int8_weight_bytes(rows: int, cols: int) -> tuple[int, int]:
    """(int8 weight, fp32 row scales) of an LLM.int8 weight (out = rows, in = cols): (rows cols, 4 rows)."""
    return rows * cols * INT8_BYTES, rows * FP32_BYTES


SHARED_NESTED_MAP_BYTES = BNB_DYNAMIC_MAP_ENTRIES * FP32_BYTES  # once per process with double quantization
