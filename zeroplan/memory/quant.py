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
A pre-quantized FP8 block-scaled checkpoint (DeepSeek-V3, Qwen3-FP8: quantization_config quant_method fp8,
weight_block_size [128, 128]), as transformers loads it (transformers==5.25.0:transformers/integrations/
finegrained_fp8.py FP8Linear.__init__): weight (out, in) float8_e4m3fn, one byte per element; weight_scale_inv
(ceil(out / b0), ceil(in / b1)) float32; the output head left in the compute dtype (get_modules_to_not_convert).
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
    fp8 = "fp8"  # a pre-quantized FP8 block-scaled checkpoint (transformers' FP8Linear); a frozen base only

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

# MatMul4Bit.forward kept its input A for the backward (`ctx.tensors = (A, B)` whenever A or B needs a gradient,
# bitsandbytes@9e75374104cec965d9a4a630a68ce4e2b77b066f^:bitsandbytes/autograd/_functions.py:516) although the
# backward never reads it; commit 9e75374 ("fix QLoRA mem bug: delete useless buffered activation", first released
# in 0.43.2) keeps (None, B). Earlier releases save every quantized linear's input where a gradient flows through it.
BNB_DROPS_INPUT_SINCE = (0, 43, 2)
BNB_MEASURED = "0.50.2"  # the release validation/ measures on CPU; the default


class QloraStack(str, Enum):
    """Which code quantizes the base and prepares it for training (docs/finetune.md, "QLoRA on a GPU")."""

    # transformers' bitsandbytes quantizer (every nn.Linear but the output head) + peft's
    # prepare_model_for_kbit_training, its fp32 cast kept (peft's QLoRA guide and scripts written after it)
    peft = "peft"
    # TRL's SFTTrainer: no prepare_model_for_kbit_training, and a quantized model's adapters cast to bf16
    # (trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8:trl/trainer/sft_trainer.py, "When using QLoRA, the PEFT adapter
    # weights are converted to bf16")
    trl = "trl"
    # axolotl: prepare_model_for_kbit_training, then every norm and the embedding modules back to the training dtype
    # (axolotl@ae7395e9f04f3551dfaff9380f0da47d28186b10:src/axolotl/loaders/model.py _configure_embedding_dtypes,
    # _convert_embedding_modules_dtype); peft's fp32 adapters
    axolotl = "axolotl"
    # LLaMA-Factory: its own prepare_model_for_training (no fp32 cast unless upcast_layernorm;
    # LLaMA-Factory@908cd68e457daf38e7aae14cbc99e5ac01524496:src/llamafactory/model/model_utils/checkpointing.py),
    # peft's fp32 adapters
    llamafactory = "llamafactory"
    # litgpt --quantize bnb.nf4: Lightning's BitsandbytesPrecision replaces every nn.Linear, the head included
    # (ignore_modules empty), and casts nothing to fp32
    litgpt = "litgpt"
    # torchtune's qlora_* builders: torchao NF4Tensor weights in every layer linear (LoRALinear(quantize_base=True),
    # FrozenNF4Linear), the output projection not quantized ("TODO: quantize_base is not applied to final
    # output_proj currently", torchtune@bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1:torchtune/models/llama3/
    # _component_builders.py); torchao==0.18.0 LinearNF4 saves the weight only (nf4_tensor.py); nothing cast to fp32
    torchtune = "torchtune"


def bnb_version(text: str) -> tuple[int, ...]:
    """A bitsandbytes release as numbers: "0.41.1" -> (0, 41, 1); ValueError naming the text otherwise."""
    parts = text.strip().split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"--bnb-version {text!r}: give a bitsandbytes release such as 0.41.1")
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))


def saves_matmul_input(version: str) -> bool:
    """bitsandbytes releases before 0.43.2 keep each 4-bit matmul's input for the backward (BNB_DROPS_INPUT_SINCE)."""
    return bnb_version(version) < BNB_DROPS_INPUT_SINCE


FP8_WEIGHT_BYTES = 1  # float8_e4m3fn
FP8_SCALE_BYTES = FP32_BYTES  # weight_scale_inv float32 (the ue8m0 scale format is not read)


def fp8_block_bytes(rows: int, cols: int, block: tuple[int, int]) -> tuple[int, int]:
    """(float8 weight, float32 block scales) of an FP8Linear (out = rows, in = cols) with weight_block_size `block`."""
    return rows * cols * FP8_WEIGHT_BYTES, FP8_SCALE_BYTES * blocks(rows, block[0]) * blocks(cols, block[1])
