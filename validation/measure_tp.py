"""Measure per-rank parameter, gradient, optimizer-state and saved-activation bytes under PyTorch's tensor-parallel
API (and TP x FSDP2 on a 2-D DeviceMesh), on CPU with gloo, and compare with zeroplan's mesh model.

Needs a CPU build of PyTorch and transformers; zeroplan itself never imports either.

    /work/venv-hf/bin/python validation/measure_tp.py            # every case; writes validation/tp_measured.json
    /work/venv-hf/bin/python validation/measure_tp.py --table    # the docs/parallelism.md table from the JSON

The model is transformers' LlamaForCausalLM (tiny, fp32, SDPA attention, no dropout), parallelized as torchtitan
parallelizes Llama (torchtitan/models/llama3/infra/parallelize.py, apply_tp): embed_tokens RowwiseParallel
(vocab-parallel, replicated output), q/k/v and gate/up ColwiseParallel, o and down RowwiseParallel, lm_head
ColwiseParallel with a Shard(-1) output and loss_parallel (the vocab-parallel cross-entropy); norms replicated.
TP x FSDP2: fully_shard on each layer and the model over the "dp" dimension of a (dp, tp) DeviceMesh.

Measured per rank, after one training step (forward, backward, AdamW step):
  parameters   local bytes of every parameter (DTensor.to_local; FSDP2: the sharded parameters)
  gradients    local bytes of every .grad
  optimizer    local bytes of AdamW's exp_avg and exp_avg_sq (the 0-d `step` counters left out)
  activations  unique storages autograd saves in the forward (saved_tensors_hooks), parameters excluded (FSDP2's
               unsharded parameters too: their storage is freed after the forward), measured after the forward,
               plus the logits the forward returns
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

from validation.tp_predicted import BATCH, CONFIG, SEQ, predicted  # noqa: E402
CASES = [  # (tp, dp, sequence parallel): dp > 1 is FSDP2 on the 2-D mesh
    (1, 1, 0), (2, 1, 0), (4, 1, 0), (2, 2, 0), (2, 1, 1), (4, 1, 1), (2, 2, 1),
]
if os.environ.get("ZP_CASES"):  # e.g. ZP_CASES=2x1x0,2x2x1
    CASES = [tuple(int(x) for x in c.split("x")) for c in os.environ["ZP_CASES"].split(",")]
OUT = Path(__file__).with_name("tp_measured.json")


def _local(t):
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _nbytes(tensors) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors)


def _parallelize(model, mesh, tp: int, dp: int, sp: bool):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    tp_mesh = mesh["tp"] if dp > 1 else mesh
    if tp > 1:
        # Sequence parallel as torchtitan's apply_tp: norms SequenceParallel on Shard(1), the attention and MLP
        # inputs all-gathered (PrepareModuleInput), o/down reduce-scattered back to Shard(1).
        seq = Shard(1) if sp else Replicate()
        plan = {
            "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
            "lm_head": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1), use_local_output=False),
        }
        if sp:
            plan["model.norm"] = SequenceParallel(use_local_output=True)
        for i in range(len(model.model.layers)):
            p = f"model.layers.{i}."
            plan |= {p + "self_attn.q_proj": ColwiseParallel(), p + "self_attn.k_proj": ColwiseParallel(),
                     p + "self_attn.v_proj": ColwiseParallel(), p + "self_attn.o_proj": RowwiseParallel(output_layouts=seq),
                     p + "mlp.gate_proj": ColwiseParallel(), p + "mlp.up_proj": ColwiseParallel(),
                     p + "mlp.down_proj": RowwiseParallel(output_layouts=seq)}
            if sp:
                plan |= {
                    p + "input_layernorm": SequenceParallel(use_local_output=True),
                    p + "post_attention_layernorm": SequenceParallel(use_local_output=True),
                    p + "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                        desired_input_kwarg_layouts={"hidden_states": Replicate()}),
                    p + "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                }
        parallelize_module(model, tp_mesh, plan)
    if dp > 1:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])  # root: embedding, final norm, head (its forward is Step's)


class Step(torch.nn.Module):
    """The forward as torchtitan runs it: the decoder, then the head (its logits feed loss_parallel)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.lm_head = model.model, model.lm_head

    def forward(self, ids):
        # position ids given: under sequence parallelism the embedding's output holds s/t tokens, and transformers
        # would number the positions from that
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.lm_head(self.model(input_ids=ids, position_ids=positions).last_hidden_state)


def _worker(rank: int, world: int, tp: int, dp: int, sp: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import transformers
        from torch.distributed.device_mesh import init_device_mesh
        # AsyncCollectiveTensor wraps a functional collective's output (no public import path in torch 2.13)
        from torch.distributed._functional_collectives import AsyncCollectiveTensor
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.parallel import loss_parallel

        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp")) if dp > 1 else \
            init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(**CONFIG)
        model = Step(transformers.LlamaForCausalLM(cfg).to(torch.float32))
        model.model.config._attn_implementation = "sdpa"
        model.train()
        _parallelize(model, mesh, tp, dp, bool(sp))
        params = {_local(p).untyped_storage().data_ptr() for p in model.parameters()}
        saved: dict[int, torch.Tensor] = {}

        def pack(t):
            local = _local(t) if isinstance(t, DTensor) else t
            if isinstance(local, AsyncCollectiveTensor):  # RowwiseParallel's all-reduced output, waited on
                local = local.wait()
            ptr = local.untyped_storage().data_ptr()
            # FSDP2 swaps in unsharded parameters for the forward and frees them after it: read them live, or a
            # later activation allocated at a freed parameter's address would be taken for it
            live = {_local(p).untyped_storage().data_ptr() for p in model.parameters()}
            if ptr not in params and ptr not in live:
                saved.setdefault(ptr, local)
            return t

        torch.manual_seed(1)
        ids = torch.randint(1, CONFIG["vocab_size"], (BATCH, SEQ))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = model(ids)
            labels = ids[:, 1:].reshape(-1)
            if tp > 1:
                with loss_parallel():
                    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels)
            else:
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels)
        local_logits = _local(logits)
        acts = sum(t.untyped_storage().nbytes() for t in saved.values())  # after the forward: freed storages are 0
        if local_logits.untyped_storage().data_ptr() not in saved:
            acts += local_logits.untyped_storage().nbytes()
        if tp > 1:
            with loss_parallel():
                loss.backward()
        else:
            loss.backward()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        opt.step()
        state = [v for s in opt.state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]
        if rank == 0 and os.environ.get("ZP_SHOW_GRADS"):
            for name, p in model.named_parameters():
                g = p.grad
                print(name, tuple(_local(p).shape), type(g).__name__, getattr(g, "placements", None),
                      tuple(_local(g).shape), flush=True)
        row = {"rank": rank, "tp": tp, "dp": dp, "sequence_parallel": bool(sp), "parameters": _nbytes(model.parameters()),
               "gradients": _nbytes(p.grad for p in model.parameters() if p.grad is not None),
               "optimizer": _nbytes(state), "activations": acts}
        Path(out, f"{rank}.json").write_text(json.dumps(row))
    finally:
        dist.destroy_process_group()


def measure(tp: int, dp: int, sp: int, port: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=(tp * dp, tp, dp, sp, port, out), nprocs=tp * dp, join=True)
        return [json.loads(Path(out, f"{r}.json").read_text()) for r in range(tp * dp)]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    rows = []
    for i, (tp, dp, sp) in enumerate(CASES):
        want = predicted(tp, dp, sp)
        for got in measure(tp, dp, sp, _free_port()):
            errors = {k: (want[k] - got[k]) / got[k] for k in want}
            rows.append({**got, "zeroplan": want, "error": errors})
            print(f"tp {tp} dp {dp} sp {sp} rank {got['rank']}: " + ", ".join(
                f"{k} {got[k]:,} vs {want[k]:,} ({errors[k]:+.2%})" for k in want), flush=True)
    OUT.write_text(json.dumps({"config": CONFIG, "batch": BATCH, "seq_len": SEQ,
                               "torch": torch.__version__, "rows": rows}, indent=1) + "\n")


def table() -> str:
    """The docs/parallelism.md table from validation/tp_measured.json (one row per case: its ranks agree)."""
    data = json.loads(OUT.read_text())
    lines = ["| tp | FSDP2 dp | SP | ranks | parameters | gradients | optimizer | activations | zeroplan's error, worst rank |",
             "|---|---|---|---|---|---|---|---|---|"]
    cases: dict[tuple, list[dict]] = {}
    for row in data["rows"]:
        cases.setdefault((row["tp"], row["dp"], row["sequence_parallel"]), []).append(row)
    for (tp, dp, sp), rows in cases.items():
        first = rows[0]
        worst = max((abs(r["error"][k]), k) for r in rows for k in r["error"])
        lines.append(f"| {tp} | {dp} | {'on' if sp else 'off'} | {len(rows)} | " + " | ".join(
            f"{first[k]:,} (zeroplan {first['zeroplan'][k]:,})" for k in ("parameters", "gradients", "optimizer",
                                                                          "activations")) +
            f" | {worst[0]:.2%} ({worst[1]}) |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        print(table())
    else:
        main()
