"""How the stacks store LoRA adapters and prepare a quantized base, per engine (docs/finetune.md).

peft's fp32 adapters on a 16-bit base (autocast_adapter_dtype), peft's prepare_model_for_kbit_training, and which
stack quantized the base (memory.quant.QloraStack), with the words the estimate says about them. memory.tuned
prices the states with these. Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.memory.finetune import Tuning
from zeroplan.memory.quant import QloraStack, Quant, saves_matmul_input
from zeroplan.memory.recipes import FP32_BYTES, OPTIMIZER_STATES_PER_PARAM, Recipe
from zeroplan.memory.setup import Engine


def adapter_storage(recipe: Recipe, store, fp32: bool):
    """(p, g, k, c) of the LoRA adapters under a PyTorch engine.

    fp32 (peft get_peft_model's autocast_adapter_dtype=True, its default): peft==0.21.2:peft/tuners/tuners_utils.py
    cast_adapter_dtype upcasts every adapter parameter that is float16 or bfloat16 to float32, so on a 16-bit base
    without a master (bf16-true) they hold (4, 4, s x 4) bytes (torch's AdamW keeps its states in the parameter's
    dtype); under PyTorch mixed precision they are fp32 already. False: the base's dtype, its states in it too.
    """
    from zeroplan.memory.engines.storage import Storage

    states = OPTIMIZER_STATES_PER_PARAM[recipe.optimizer]
    if fp32:
        return store if store.param == FP32_BYTES else Storage(FP32_BYTES, FP32_BYTES, states * FP32_BYTES, store.compute)
    return Storage(store.compute, store.compute, states * store.compute, store.compute)


# peft==0.21.2:peft/utils/other.py prepare_model_for_kbit_training: "cast all non INT8 parameters to fp32": every
# float16/bfloat16 parameter that is not a Params4bit (the embedding, the norms, the LM head, biases) becomes fp32.
# Transformers' and TRL's QLoRA recipes call it on one GPU and under DDP; DeepSpeed casts the module back to
# 16-bit (runtime/engine.py _cast_module_mixed_precision) and FSDP's QLoRA recipe does not call it.
KBIT_PREPARED_ENGINES = (Engine.none, Engine.ddp)


def kbit_prepared(tuning: Tuning, engine: Engine) -> bool:
    """peft's prepare_model_for_kbit_training runs: a quantized base on one GPU or under DDP, on the peft stack."""
    return (tuning.spec.quant is not Quant.none and engine in KBIT_PREPARED_ENGINES
            and tuning.spec.qlora_stack is QloraStack.peft)


def frozen_element(tuning: Tuning, store, engine: Engine) -> int:
    """Bytes per frozen floating-point element: fp32 after prepare_model_for_kbit_training; a LoRA base is loaded
    16-bit (torch_dtype=bfloat16, as peft's recipes do); a --freeze run keeps the engine's storage for every
    parameter, frozen or not (fp32 under PyTorch mixed precision)."""
    if kbit_prepared(tuning, engine):
        return FP32_BYTES
    return store.compute if tuning.spec.lora_rank else store.param


def qlora_path_note(tuning: Tuning, engine: Engine) -> str:
    """Which QLoRA path the estimate assumes, in words (docs/finetune.md, "QLoRA on a GPU")."""
    spec = tuning.spec
    if spec.qlora_stack is QloraStack.litgpt:
        path = ("QLoRA path: litgpt --quantize bnb.nf4 (Lightning BitsandbytesPrecision): every linear 4-bit, the "
                "LM head too; the other parameters in the precision's dtype")
    elif spec.qlora_stack is QloraStack.torchtune:
        return ("QLoRA path: torchtune's qlora builders (torchao NF4 in every layer linear, the output projection "
                "16-bit, nothing cast to fp32; torchao 0.18.0's linear_nf4 saves the weight only), its bytes taken as "
                "bitsandbytes' double-quantized NF4")
    elif spec.qlora_stack is QloraStack.trl:
        path = ("QLoRA path: TRL SFTTrainer (transformers' quantizer, the LM head 16-bit, no "
                "prepare_model_for_kbit_training, adapters cast to bf16)")
    elif spec.qlora_stack is QloraStack.axolotl:
        path = ("QLoRA path: axolotl (transformers' quantizer, the LM head 16-bit; prepare_model_for_kbit_training, "
                "then every norm and the embedding modules back to the training dtype: no lasting fp32 cast)")
    elif spec.qlora_stack is QloraStack.llamafactory:
        path = ("QLoRA path: LLaMA-Factory (transformers' quantizer, the LM head 16-bit, its own "
                "prepare_model_for_training: nothing cast to fp32 unless upcast_layernorm)")
    elif kbit_prepared(tuning, engine):
        path = ("QLoRA path: transformers + peft prepare_model_for_kbit_training, kept: the embedding, "
                "norms and LM head fp32, so the residual stream and the checkpointed layer inputs are fp32; without "
                "autocast (bf16-true) every activation outside the 4-bit matmuls is fp32; under autocast (bf16/fp16-"
                "mixed) the adapters, the attention core and the head compute on 16-bit casts, each adapter and the "
                "head keeping their own (measured)")
    else:
        path = (f"QLoRA path: transformers' bitsandbytes quantizer (the LM head stays 16-bit); under {engine.value} "
                "no prepare_model_for_kbit_training cast is kept (DeepSpeed casts the module back to 16-bit, "
                "FSDP's QLoRA recipe does not call it)")
    saves = saves_matmul_input(spec.bnb_version)
    return path + (f"; bitsandbytes {spec.bnb_version}: " + (
        "each 4-bit matmul keeps its input for the backward (before 0.43.2)" if saves
        else "a 4-bit matmul keeps only the packed weight (since 0.43.2)"))


def adapter_note(tuning: Tuning, engine: Engine) -> str:
    """The adapters' dtype under this engine, in words."""
    spec = tuning.spec
    if engine is Engine.deepspeed:
        return "DeepSpeed casts the adapters to the 16-bit dtype with an fp32 master in the optimizer"
    if spec.adapter_fp32:
        what = "peft autocast_adapter_dtype: adapters fp32 (4 B, gradients 4 B, fp32 optimizer states) on a 16-bit base"
    elif spec.qlora_stack is QloraStack.trl:
        what = "TRL casts a quantized model's adapters to bf16: adapters, gradients and optimizer states 16-bit"
    elif spec.qlora_stack in (QloraStack.litgpt, QloraStack.torchtune):
        what = f"{spec.qlora_stack.value}'s LoRA: adapters, gradients and optimizer states in the model's dtype"
    else:
        what = ("peft autocast_adapter_dtype=False (--adapter-dtype base): adapters, gradients and optimizer states "
                "in the base's dtype")
    return what + "; FSDP1 wraps them as units of their own (peft fsdp_auto_wrap_policy)"
