"""Measure per-rank saved-activation bytes under DeepSpeed-Ulysses sequence parallelism (the HF/ALST path a
ds_config's `sequence_parallel_size` drives), on CPU with gloo, for the tiny Llama of validation/measure_tp.py, and
compare with zeroplan's `--cp N --cp-comm a2a` (validation/ulysses_predicted.py).

    python validation/measure_ulysses.py   # every case; writes validation/ulysses_measured.json
    ZP_CASES=gqa-sp2 ZP_SHOW_SAVED=1 python validation/measure_ulysses.py   # one case, its saved storages

with torch 2.13.0, transformers 5.24 and, for DeepSpeed's own class, deepspeed 0.19.8 and einops (the committed JSON
was measured so). The attention is then DeepSpeed's UlyssesSPAttentionHF, registered with
UlyssesSPAttentionHF.register_with_transformers as Accelerate registers it (sdpa core, seq_length_is_variable);
without deepspeed (or with ZP_REIMPLEMENTED=1) it is make_ulysses below, its forward op for op
(deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641:deepspeed/runtime/sequence_parallel/ulysses_sp.py),
written with permute/reshape where it uses einops.rearrange (the same views and copies): q, k, v [b, heads, s/sp, d]
to [s/sp, b, heads, d]; k and v repeat_interleave'd by sp // kv when kv heads < sp (kv_replication_factor); each
reshaped to [sp, s/sp, b, heads/sp, d], made contiguous and sent through _DimZeroAllToAll (deepspeed/sequence/
layer.py: all_to_all_single into torch.empty_like, backward the same all-to-all, no tensor saved); then [s, b,
heads/sp, d] -> [b, heads/sp, s, d] contiguous into transformers' own sdpa_attention_forward with the mask dropped
(uattn_wrapper) and the position ids all-gathered; the output [b, s, heads/sp, d] goes back through
_partition_global_sequence to [b, s/sp, heads x d]. The batch is what UlyssesSPDataLoaderAdapter hands each rank:
input_ids, position_ids [b, s] (it requires them per sample) and shift_labels (labels padded with -100 and shifted),
each sliced to the rank's s/sp tokens; the loss is `model.loss_function(logits, labels=None, shift_labels=...)` as
the ALST tutorial computes it per rank (docs/_tutorials/ulysses-alst-sequence-parallelism.md; its cross-rank
weighting adds scalars only and is left out). Saved activations are counted as validation/measure_tp.py counts them
(a saved_tensors_hooks pack hook: unique storages, parameters excluded, plus the logits).
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

from validation.ulysses_predicted import CASES, SEQ, case_batch, case_config, predicted  # noqa: E402

OUT = Path(__file__).with_name("ulysses_measured.json")
# With deepspeed importable (and einops, which ulysses_sp.py imports), DeepSpeed's own UlyssesSPAttentionHF runs;
# else the re-implementation below. ZP_REIMPLEMENTED=1 forces the latter.
try:
    import deepspeed  # noqa: F401

    USE_DEEPSPEED = not os.environ.get("ZP_REIMPLEMENTED")
except ImportError:
    USE_DEEPSPEED = False


class DimZeroAllToAll(torch.autograd.Function):
    """deepspeed/sequence/layer.py _DimZeroAllToAll: all_to_all_single over dim 0; saves nothing."""

    @staticmethod
    def forward(ctx, x):
        out = torch.empty_like(x).contiguous()
        dist.all_to_all_single(out, x.contiguous())
        return out

    @staticmethod
    def backward(ctx, grad):
        return DimZeroAllToAll.apply(grad)


def make_ulysses(core, heads: int, kv_heads: int, head_dim: int):
    """UlyssesSPAttentionHF.forward around `core` (transformers' sdpa_attention_forward), as uattn_wrapper calls it."""
    ws = dist.get_world_size()
    local_q = heads // ws
    replicate = ws // kv_heads
    local_kv = 1 if replicate > 1 else kv_heads // ws

    def combine(x, local, kv):  # _combine_local_sequences.combine_sequence: [sl_l bs hc hs] -> [sl bs hc_l hs]
        sl_l, bs = x.shape[:2]
        if kv and replicate > 1:
            x = x.repeat_interleave(replicate, dim=2)
        x = x.reshape([sl_l, bs, ws, local, head_dim]).permute(2, 0, 1, 3, 4).contiguous()
        out = DimZeroAllToAll.apply(x)
        return out.reshape([sl_l * ws, *out.shape[2:]]).contiguous()

    def attention(module, query, key, value, attention_mask, *args, **kwargs):
        attention_mask = None  # uattn_wrapper discards 4D masks
        q, k, v = (t.permute(2, 0, 1, 3) for t in (query, key, value))  # "bs hc sl hs -> sl bs hc hs"
        gathered = [torch.empty_like(kwargs["position_ids"]) for _ in range(ws)]
        dist.all_gather(gathered, kwargs["position_ids"])
        kwargs["position_ids"] = torch.cat(gathered, dim=1)
        q, k, v = combine(q, local_q, False), combine(k, local_kv, True), combine(v, local_kv, True)
        q, k, v = (t.permute(1, 2, 0, 3).contiguous() for t in (q, k, v))  # "sl bs hc_l hs -> bs hc_l sl hs"
        if replicate > 1:
            module.num_key_value_groups = q.size(-3) // k.size(-3)
        context, weights = core(module, q, k, v, attention_mask, *args, **kwargs)  # [bs sl hc_l hs]
        context = context.permute(1, 0, 2, 3)  # "bs sl ... -> sl bs ..."
        context = context.reshape([*context.shape[:2], -1])
        sl, bs, em_l = context.shape  # _partition_global_sequence
        x = context.reshape([ws, sl // ws, bs, em_l]).contiguous()
        out = DimZeroAllToAll.apply(x).permute(1, 2, 0, 3)  # "ws sl_l bs em_l -> sl_l bs ws em_l"
        out = out.reshape([*out.shape[:2], -1]).contiguous().permute(1, 0, 2)  # [sl_l bs em] -> [bs sl_l em]
        return out.reshape([*out.shape[:2], -1]), weights

    return attention


def _worker(rank: int, world: int, port: int, name: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if USE_DEEPSPEED:  # deepspeed.comm over the process group just made
        import deepspeed

        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
        deepspeed.init_distributed(dist_backend="gloo")
    try:
        import transformers
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        config, checkpointing = case_config(name)
        plain = CASES[name].get("plain", False)
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config, attn_implementation="sdpa"))
        if not plain and USE_DEEPSPEED:  # DeepSpeed's own class, registered as Accelerate registers it
            from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

            UlyssesSPAttentionHF.register_with_transformers(
                model_name_or_path=model, core_attn_implementation="sdpa", sequence_parallel_size=world,
                micro_batch_size=case_batch(name), seq_length_is_variable=True)
        elif not plain:  # register_with_transformers overrides the core's key with its wrapper
            ALL_ATTENTION_FUNCTIONS["sdpa"] = make_ulysses(
                ALL_ATTENTION_FUNCTIONS["sdpa"], config["num_attention_heads"], config["num_key_value_heads"],
                config["head_dim"])
        model.to(torch.float32).train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        torch.manual_seed(1)
        batch_size = case_batch(name)
        ids = torch.randint(1, config["vocab_size"], (batch_size, SEQ))
        positions = torch.arange(SEQ).unsqueeze(0).expand(batch_size, SEQ).contiguous()  # the collator's, per sample
        shift = torch.nn.functional.pad(ids, (0, 1), value=-100)[..., 1:].contiguous()  # the adapter's shift_labels
        local = slice(rank * SEQ // world, (rank + 1) * SEQ // world)
        # the adapter's shard is a copy (`batch[k][:, chunk].cpu()`, then moved to the device): clone, so that a
        # one-sequence slice does not keep the whole tensor's storage alive as a contiguous view would
        batch = {k: v[:, local].clone() for k, v in
                 (("input_ids", ids), ("position_ids", positions), ("shift_labels", shift))}
        saved: dict[int, torch.Tensor] = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params:
                saved.setdefault(ptr, t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            positions = {} if plain else {"position_ids": batch["position_ids"]}  # plain: the model's own [1, s]
            logits = model(input_ids=batch["input_ids"], **positions).logits
            loss = model.loss_function(logits=logits, labels=None, shift_labels=batch["shift_labels"],
                                       vocab_size=config["vocab_size"])
        acts = sum(t.untyped_storage().nbytes() for t in saved.values())
        if rank == 0 and os.environ.get("ZP_SHOW_SAVED"):  # the saved storages, for attributing a gap
            for t in saved.values():
                print(tuple(t.shape), t.dtype, t.untyped_storage().nbytes(), flush=True)
        if logits.untyped_storage().data_ptr() not in saved:
            acts += logits.untyped_storage().nbytes()
        loss.backward()
        row = {"case": name, "rank": rank, "attention": _attention_kind(plain), "sp": world, "local_seq_len": int(logits.shape[1]), "activations": acts,
               "grads": all(p.grad is not None for p in model.parameters())}
        Path(out, f"{rank}.json").write_text(json.dumps(row))
    finally:
        dist.destroy_process_group()


def _attention_kind(plain: bool) -> str:
    if plain:
        return "transformers sdpa (no Ulysses)"
    if USE_DEEPSPEED:
        import deepspeed

        return f"deepspeed {deepspeed.__version__} UlyssesSPAttentionHF"
    return "UlyssesSPAttentionHF re-implemented (validation/measure_ulysses.py make_ulysses)"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    names = os.environ.get("ZP_CASES", ",".join(CASES)).split(",")
    rows = []
    for name in names:
        sp = CASES[name]["sp"]
        with tempfile.TemporaryDirectory() as out:
            mp.spawn(_worker, args=(sp, _free_port(), name, out), nprocs=sp, join=True)
            for r in range(sp):
                row = json.loads(Path(out, f"{r}.json").read_text())
                row["zeroplan"] = predicted(name)
                row["error"] = (row["zeroplan"] - row["activations"]) / row["activations"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    if "ZP_CASES" not in os.environ:
        OUT.write_text(json.dumps({"seq_len": SEQ, "torch": torch.__version__,
                                   "cases": CASES, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
