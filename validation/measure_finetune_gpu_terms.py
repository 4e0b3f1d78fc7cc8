"""What peft's defaults keep on a 16-bit base, measured on CPU (issue 23, items 2 and 3): writes finetune_gpu_terms.json.

On a tiny bf16 Llama (validation/measure_finetune_activations.py's model and counting; torch 2.13.0, transformers,
peft 0.21.2, bitsandbytes 0.50.2):
  autocast   get_peft_model(model, LoraConfig(r 8, all-linear), autocast_adapter_dtype=True | False): the bytes of
             the trainable parameters, of their gradients after one backward, of torch.optim.AdamW's exp_avg +
             exp_avg_sq after one step, and the saved activations (unique storages autograd still holds when the
             forward ends) of one forward
  kbit       the same model loaded in NF4 (double quantization) by transformers on the CPU, with and without
             peft's prepare_model_for_kbit_training(use_gradient_checkpointing=False): the bytes of the
             non-quantized parameters and their dtypes, the logits' dtype, and the saved activations
  matmul4bit what bitsandbytes' MatMul4Bit saves for its backward per call (the packed weight only, a parameter)
What differs on CUDA (the 4-bit matmul kernel, which dequantizes into a transient (out, in) tensor above 1536
tokens) is modelled from source: docs/finetune.md, "QLoRA on a GPU".
    python validation/measure_finetune_gpu_terms.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure_activations as ma  # noqa: E402
import measure_finetune_activations as mfa  # noqa: E402

OUT = Path(__file__).resolve().parent / "finetune_gpu_terms.json"
FAMILY, LORA = "llama", {"r": 8, "target_modules": "all-linear"}


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _step(model, arch) -> dict:
    """Saved activations of one forward, then one backward and one AdamW step: what the trainable tensors keep."""
    m, _, loss = mfa.measure(model, arch, ma.Checkpointing.none)
    loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4)
    opt.step()
    states = [s for st in opt.state.values() for k, s in st.items() if k in ("exp_avg", "exp_avg_sq")]
    return {"trainable_params": sum(p.numel() for p in trainable), "trainable_bytes": _bytes(trainable),
            "grad_bytes": _bytes(p.grad for p in trainable), "adamw_state_bytes": _bytes(states),
            "saved_bytes": m.saved, "activation_bytes": m.total(ma.Checkpointing.none, None),
            "adapter_dtypes": sorted({str(p.dtype) for p in trainable})}


def autocast(flag: bool) -> dict:
    from peft import LoraConfig, get_peft_model

    model, arch = mfa.fresh(FAMILY, "bf16", ma.Checkpointing.none)
    model = get_peft_model(model, LoraConfig(**LORA), autocast_adapter_dtype=flag)
    return {"autocast_adapter_dtype": flag, **_step(model, arch)}


def kbit(prepared: bool) -> dict:
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    model, arch = mfa.fresh(FAMILY, "bf16", ma.Checkpointing.none)
    model = mfa.quantized(model, torch.bfloat16)
    if prepared:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    model = get_peft_model(model, LoraConfig(**LORA))
    floats = [(n, p) for n, p in model.named_parameters()
              if p.__class__.__name__ != "Params4bit" and "lora_" not in n]
    ids = torch.randint(1, arch.vocab_size, (mfa.BATCH, mfa.SEQ))
    with torch.no_grad():
        logits_dtype = str(model(input_ids=ids).logits.dtype)
    return {"prepared": prepared, "frozen_float_params": sum(p.numel() for _, p in floats),
            "frozen_float_bytes": _bytes(p for _, p in floats),
            "frozen_float_dtypes": sorted({str(p.dtype) for _, p in floats}), "logits_dtype": logits_dtype,
            **_step(model, arch)}


def matmul4bit() -> dict:
    """One MatMul4Bit call on a bf16 input that needs a gradient: the tensors its ctx keeps for the backward."""
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    w = torch.randn(160, 64, dtype=torch.bfloat16)
    packed, state = F.quantize_4bit(w, quant_type="nf4")
    x = torch.randn(128, 64, dtype=torch.bfloat16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = bnb.matmul_4bit(x, packed.t(), quant_state=state)
    ctx_tensors = [t for t in out.grad_fn.tensors if t is not None] if hasattr(out.grad_fn, "tensors") else []
    return {"input_bytes": _bytes([x]), "packed_bytes": _bytes([packed]), "hook_saved_bytes": _bytes(saved),
            "ctx_tensors": [[list(t.shape), str(t.dtype)] for t in ctx_tensors],
            "ctx_holds_input": any(t.data_ptr() == x.data_ptr() for t in ctx_tensors)}


def main() -> None:
    import bitsandbytes
    import peft
    import transformers

    data = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "peft": peft.__version__, "bitsandbytes": bitsandbytes.__version__},
            "family": FAMILY, "lora": LORA, "seq_len": mfa.SEQ, "micro_batch": mfa.BATCH,
            "autocast": [autocast(True), autocast(False)], "kbit": [kbit(False), kbit(True)],
            "matmul4bit": matmul4bit()}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
