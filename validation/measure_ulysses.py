"""Measure per-rank saved-activation bytes under DeepSpeed-Ulysses sequence parallelism, on CPU with gloo, for the
tiny Llama of validation/measure_tp.py, and compare with zeroplan's context-parallel (--cp) activations.

    /work/venv-hf/bin/python validation/measure_ulysses.py      # sp = 2 and 4; writes validation/ulysses_measured.json

The attention wrapper does what DeepSpeed's DistributedAttention does with _SeqAllToAll
(deepspeedai/DeepSpeed@25493c74bfbb1ffbea636920145d35b9754f42d0:deepspeed/sequence/layer.py, batch_dim_idx 0,
scatter_idx 2, gather_idx 1): each rank holds s/sp tokens outside attention; q, k and v ([b, s/sp, heads, d]) go
through an all-to-all (all_to_all_single) that scatters the heads and gathers the sequence, the local attention
runs on heads/sp heads over the whole sequence, and one all-to-all takes its output back to [b, s/sp, heads, d].
The backward of each all-to-all is the reverse all-to-all, and the autograd Function saves no tensor (as
_SeqAllToAll). Saved activations are counted as validation/measure_tp.py counts them (a saved_tensors_hooks pack
hook: unique storages, parameters excluded, plus the logits). The loss is each rank's mean over its own tokens.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from validation.tp_predicted import BATCH, CONFIG, SEQ  # noqa: E402

SPS = tuple(int(s) for s in os.environ.get("ZP_SPS", "2,4").split(","))
OUT = Path(__file__).with_name("ulysses_measured.json")


def predicted(sp: int) -> int:
    """zeroplan's activations for one context-parallel rank, Mesh(cp=sp) (fp32, flash/SDPA kernels)."""
    from zeroplan.memory.activations.mesh import rank_activations
    from zeroplan.memory.setup import Attention, Precision, TrainingSetup
    from zeroplan.models.families import parse_family_config
    from zeroplan.models.mesh import Mesh

    config = parse_family_config({"model_type": "llama", **CONFIG}, strict=False)
    setup = TrainingSetup(precision=Precision.fp32, seq_len=SEQ, micro_batch=BATCH, attention=Attention.flash)
    return rank_activations(config.architecture(), setup, Mesh(gpus=sp, cp=sp))[0].total_bytes


def _all_to_all(x: torch.Tensor, scatter: int, gather: int) -> torch.Tensor:
    """single_all_to_all of layer.py for batch_dim_idx 0: [b, s, h, d] scattered on `scatter`, gathered on `gather`."""
    p = dist.get_world_size()
    b, s, h, d = x.shape
    if scatter == 2:  # [b, s/p, h, d] -> [b, s, h/p, d]
        t = x.reshape(b, s, p, h // p, d).permute(2, 0, 1, 3, 4).contiguous()
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t)
        return out.permute(1, 0, 2, 3, 4).reshape(b, p * s, h // p, d).contiguous()
    t = x.reshape(b, p, s // p, h, d).permute(1, 0, 2, 3, 4).contiguous()  # [b, s, h/p, d] -> [b, s/p, h, d]
    out = torch.empty_like(t)
    dist.all_to_all_single(out, t)
    return out.permute(1, 2, 0, 3, 4).reshape(b, s // p, p * h, d).contiguous()


class SeqAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scatter, gather):
        ctx.scatter, ctx.gather = scatter, gather
        return _all_to_all(x, scatter, gather)

    @staticmethod
    def backward(ctx, grad):
        return SeqAllToAll.apply(grad, ctx.gather, ctx.scatter), None, None


def ulysses_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention interface ([b, heads, s/sp, d] in, [b, s/sp, heads, d] out) as DistributedAttention:
    all-to-all q, k, v to [b, s, heads/sp, d], causal SDPA over the whole sequence, all-to-all the output back."""
    q, k, v = (SeqAllToAll.apply(t.transpose(1, 2), 2, 1) for t in (query, key, value))
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, scale=scaling,
        enable_gqa=q.shape[2] != k.shape[2])
    return SeqAllToAll.apply(out.transpose(1, 2), 1, 2), None


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import transformers

        transformers.AttentionInterface.register("ulysses", ulysses_attention)
        transformers.AttentionMaskInterface.register("ulysses", transformers.AttentionMaskInterface._global_mapping["sdpa"])
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).to(torch.float32)
        model.config._attn_implementation = "ulysses"
        model.train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        torch.manual_seed(1)
        ids = torch.randint(1, CONFIG["vocab_size"], (BATCH, SEQ))
        labels = torch.roll(ids, -1, dims=1)
        local = slice(rank * SEQ // world, (rank + 1) * SEQ // world)
        positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ)[:, local].contiguous()
        saved: dict[int, torch.Tensor] = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params:
                saved.setdefault(ptr, t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = model(input_ids=ids[:, local].contiguous(), position_ids=positions).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels[:, local].reshape(-1))
        acts = sum(t.untyped_storage().nbytes() for t in saved.values())
        if rank == 0 and os.environ.get("ZP_SHOW_SAVED"):  # the saved storages, for attributing a gap
            for t in saved.values():
                print(tuple(t.shape), t.untyped_storage().nbytes(), flush=True)
        if logits.untyped_storage().data_ptr() not in saved:
            acts += logits.untyped_storage().nbytes()
        loss.backward()
        row = {"rank": rank, "sp": world, "local_seq_len": int(logits.shape[1]), "activations": acts,
               "grads": all(p.grad is not None for p in model.parameters())}
        Path(out, f"{rank}.json").write_text(json.dumps(row))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    rows = []
    for sp in SPS:
        with tempfile.TemporaryDirectory() as out:
            mp.spawn(_worker, args=(sp, _free_port(), out), nprocs=sp, join=True)
            for r in range(sp):
                row = json.loads(Path(out, f"{r}.json").read_text())
                row["zeroplan_cp"] = predicted(sp)
                row["error"] = (row["zeroplan_cp"] - row["activations"]) / row["activations"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    OUT.write_text(json.dumps({"config": CONFIG, "batch": BATCH, "seq_len": SEQ, "torch": torch.__version__,
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
