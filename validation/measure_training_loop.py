"""Measure what litgpt's training loop keeps alive from one micro-step into the next, and compare with zeroplan.

Needs a CPU build of PyTorch and Lightning 2.4.0 (`pip install lightning==2.4.0`; litgpt@00af8b0 pins
lightning==2.4.0.dev20240728). litgpt itself is not needed: its loop is reproduced line for line from
Lightning-AI/litgpt@00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d litgpt/finetune/lora.py lines 303-310:

    logits = model(input_ids, lm_head_chunk_size=128)
    logits[-1] = logits[-1][..., :-1, :]
    loss = chunked_cross_entropy(logits, targets[..., 1:])
    fabric.backward(loss)
    ...
    loss = running_loss.compute().item()           # log_interval 1: `loss` becomes a float

so `logits` (a list of tensors whose grad_fn reaches the whole graph) is the previous micro-step's until the next
`model(...)` returns. The model is a small GPT of litgpt's shape (fused qkv, LLaMAMLP fc_1/fc_2/proj, untied head,
LoRA with dropout on every linear, litgpt/lora.py), run by lightning.Fabric(precision="bf16-true"), whose
HalfPrecision.convert_output casts the returned logits to torch.get_default_dtype() (fp32). Its base linears are
either torch's (LoRA) or a 4-bit linear's autograd function as bitsandbytes 0.42.0 wrote it
(bitsandbytes@0.42.0 bitsandbytes/autograd/_functions.py MatMul4Bit.forward: `ctx.tensors = (A, B)`, the input
kept as an attribute of ctx, not through save_for_backward; the weight here is a frozen bf16 tensor, which changes
no activation byte).

Measured (CPU stand-in for the CUDA allocator) with validation/measure_reference.py's LiveBytes: every storage an aten
op returns is tracked by a weak reference; after each op the bytes still alive are summed, parameters and inputs
excluded.
  first     the most bytes alive while micro-step 1 runs its forward (nothing carried from before)
  second    the same for micro-step 2, which starts with micro-step 1's logits and graph referenced by the loop
  grads     the adapters' gradients micro-step 1 left (zeroplan counts them as gradients, not activations)
  carried   second - first - grads
  zeroplan  the same model as a Llama config.json through zeroplan.api.estimate(..., training_loop="litgpt"):
            its activations' carried_bytes (LoRA on every linear and the head, dropout 0.05; the 4-bit rows as
            --qlora --qlora-stack litgpt --bnb-version 0.42.0)

    python validation/measure_training_loop.py              # table on stdout, JSON to training_loop_measured.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_reference import LiveBytes  # noqa: E402  (the storages alive after each aten op)
from training_loop_model import DROPOUT, HEADS, RANK, zeroplan_carried  # noqa: E402

OUT = Path(__file__).resolve().parent / "training_loop_measured.json"
CHUNK = 128  # litgpt/finetune/lora.py: model(input_ids, lm_head_chunk_size=128)
# (hidden, intermediate, layers, vocab, micro-batch, sequence)
SHAPES = [(64, 176, 2, 1000, 2, 256), (128, 352, 3, 4000, 1, 384), (96, 256, 2, 2000, 4, 128)]


class MatMul4Bit042(torch.autograd.Function):
    """The save rule of bitsandbytes 0.42.0's MatMul4Bit: the input and weight kept on ctx whenever a gradient flows."""

    @staticmethod
    def forward(ctx, a, w):
        ctx.tensors = (a, w) if ctx.needs_input_grad[0] else (None, None)
        return a @ w.t()

    @staticmethod
    def backward(ctx, grad):
        _, w = ctx.tensors
        return grad @ w, None


class LoRALinear(nn.Module):
    """litgpt/lora.py LoRALinear: the base linear plus dropout(x) @ A^T @ B^T * scaling."""

    def __init__(self, n_in: int, n_out: int, four_bit: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) * 0.02, requires_grad=False)
        self.lora_A = nn.Parameter(torch.randn(RANK, n_in) * 0.02)
        self.lora_B = nn.Parameter(torch.zeros(n_out, RANK))
        self.dropout = nn.Dropout(DROPOUT)
        self.four_bit = four_bit

    def forward(self, x):
        base = MatMul4Bit042.apply(x, self.weight) if self.four_bit else nn.functional.linear(x, self.weight)
        return base + (self.dropout(x) @ self.lora_A.t() @ self.lora_B.t()) * 2.0


class Block(nn.Module):
    def __init__(self, h: int, inter: int, four_bit: bool):
        super().__init__()
        self.norm_1, self.norm_2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.attn, self.proj = LoRALinear(h, 3 * h, four_bit), LoRALinear(h, h, four_bit)
        self.fc_1, self.fc_2 = LoRALinear(h, inter, four_bit), LoRALinear(h, inter, four_bit)
        self.mlp_proj = LoRALinear(inter, h, four_bit)
        self.heads = HEADS

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.attn(self.norm_1(x)).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, h)
        x = x + self.proj(y)
        n = self.norm_2(x)
        return x + self.mlp_proj(nn.functional.silu(self.fc_1(n)) * self.fc_2(n))


class GPT(nn.Module):
    def __init__(self, h: int, inter: int, layers: int, vocab: int, four_bit: bool):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, inter, four_bit) for _ in range(layers))
        self.ln_f, self.lm_head = nn.RMSNorm(h), LoRALinear(h, vocab, four_bit)
        for name, p in self.named_parameters():
            p.requires_grad_("lora_" in name)

    def forward(self, ids, lm_head_chunk_size: int = 0):
        x = self.wte(ids)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return [self.lm_head(c) for c in x.split(lm_head_chunk_size, dim=1)]


def chunked_cross_entropy(logits, targets):
    """litgpt/utils.py chunked_cross_entropy for a list of logit chunks (chunk_size 128)."""
    chunks = [c.reshape(-1, c.size(-1)) for c in logits]
    targets = [t.reshape(-1) for t in targets.split(logits[0].size(1), dim=1)]
    losses = [nn.functional.cross_entropy(c, t, reduction="none") for c, t in zip(chunks, targets)]
    return torch.cat(losses).sum() / targets[0].new_tensor(sum(t.numel() for t in targets))


def measure(h: int, inter: int, layers: int, vocab: int, mb: int, seq: int, four_bit: bool) -> dict:
    import lightning as L

    fabric = L.Fabric(accelerator="cpu", devices=1, precision="bf16-true")
    with fabric.init_module():
        model = GPT(h, inter, layers, vocab, four_bit)
    model = fabric.setup_module(model)
    ids = torch.randint(0, vocab, (mb, seq))  # litgpt's batch: input_ids and labels of one length
    torch.manual_seed(0)
    peaks = {}
    with LiveBytes(ids, *model.parameters()) as rec:
        for step in ("first", "second"):
            rec.peak = 0  # the most bytes alive during this forward (the next op sets it)
            logits = model(ids, lm_head_chunk_size=CHUNK)
            peaks[step] = rec.peak
            logits[-1] = logits[-1][..., :-1, :]
            loss = chunked_cross_entropy(logits, ids[..., 1:])
            fabric.backward(loss)
            loss = loss.item()
            if step == "first":
                grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    return {"hidden": h, "intermediate": inter, "layers": layers, "vocab": vocab, "micro_batch": mb, "seq": seq,
            "four_bit": four_bit, "logits_dtype": str(logits[0].dtype), "first": peaks["first"],
            "second": peaks["second"], "grads": grads, "carried": peaks["second"] - peaks["first"] - grads}


def main() -> None:
    rows = []
    for shape in SHAPES:
        for four_bit in (False, True):
            row = measure(*shape, four_bit)
            row["zeroplan"] = zeroplan_carried(row)
            rows.append(row)
            print(f"h {row['hidden']:>4} L {row['layers']} V {row['vocab']:>5} b {row['micro_batch']} s {row['seq']:>4} "
                  f"{'4-bit' if four_bit else '16-bit'}: logits {row['logits_dtype']}, carried {row['carried']:>10,} B, "
                  f"zeroplan {row['zeroplan']:>10,} B")
    OUT.write_text(json.dumps({"lightning": __import__("lightning").__version__, "torch": torch.__version__,
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
