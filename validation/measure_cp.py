"""Try PyTorch's context parallelism (torch.distributed.tensor.experimental.context_parallel: ring attention over
SDPA) on CPU with gloo, cp = 2, for the tiny Llama of validation/measure_tp.py, and measure each rank's saved
activations if it runs; record exactly why if it does not (validation/cp_measured.json).

    /work/venv-hf/bin/python validation/measure_cp.py

The step is torchtitan's (torchtitan/train.py: the inputs, labels and position ids are the context_parallel
buffers, sharded on the sequence dimension; the forward and backward run inside the context). Saved activations
are counted as validation/measure_tp.py counts them: unique storages a saved_tensors_hooks pack hook sees in the
forward, parameters excluded, plus the logits. zeroplan's side is `rank_activations` on Mesh(cp=2) (each rank
s/cp tokens), validation/tp_predicted.py's model and batch.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from validation.tp_predicted import BATCH, CONFIG, SEQ  # noqa: E402

CP = 2
OUT = Path(__file__).with_name("cp_measured.json")


def predicted(cp: int) -> int:
    """zeroplan's activations for one context-parallel rank (fp32, flash/SDPA kernels, the whole stack)."""
    from zeroplan.memory.activations.mesh import rank_activations
    from zeroplan.memory.setup import Attention, Precision, TrainingSetup
    from zeroplan.models.families import parse_family_config
    from zeroplan.models.mesh import Mesh

    config = parse_family_config({"model_type": "llama", **CONFIG}, strict=False)
    setup = TrainingSetup(precision=Precision.fp32, seq_len=SEQ, micro_batch=BATCH, attention=Attention.flash)
    return rank_activations(config.architecture(), setup, Mesh(gpus=cp, cp=cp))[0].total_bytes


def _frames(exc: BaseException) -> list[str]:
    """The innermost frames inside torch, as file:line function (the source line that refused)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "/torch/" in f.filename] or frames
    return [f"{f.filename.split('site-packages/')[-1]}:{f.lineno} {f.name}: {f.line}" for f in inside[-3:]]


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    row: dict = {"rank": rank, "cp": world}
    try:
        import transformers
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        from torch.nn.attention import SDPBackend, sdpa_kernel

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).to(torch.float32)
        model.config._attn_implementation = "sdpa"
        model.train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        torch.manual_seed(1)
        ids = torch.randint(1, CONFIG["vocab_size"], (BATCH, SEQ))
        labels = torch.roll(ids, -1, dims=1)
        positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ).contiguous()
        saved: dict[int, torch.Tensor] = {}

        def pack(t):
            local = t.to_local() if hasattr(t, "to_local") else t
            ptr = local.untyped_storage().data_ptr()
            if ptr not in params:
                saved.setdefault(ptr, local)
            return t

        backends = os.environ.get("ZP_SDPA_BACKEND")  # e.g. EFFICIENT_ATTENTION: the kernel CP's ring handles
        kernel = sdpa_kernel([getattr(SDPBackend, backends)]) if backends else contextlib.nullcontext()
        row["sdpa_backend"] = backends or "default"
        with kernel, context_parallel(mesh, buffers=[ids, labels, positions], buffer_seq_dims=[1, 1, 1]):
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                logits = model(input_ids=ids, position_ids=positions).logits
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.reshape(-1))
            acts = sum(t.untyped_storage().nbytes() for t in saved.values())
            if logits.untyped_storage().data_ptr() not in saved:
                acts += logits.untyped_storage().nbytes()
            loss.backward()
        row |= {"runs": True, "local_seq_len": int(logits.shape[1]), "activations": acts}
    except Exception as e:  # noqa: BLE001 - the refusal is the finding
        row |= {"runs": False, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e) else ''}",
                "where": _frames(e)}
    finally:
        Path(out, f"{rank}.json").write_text(json.dumps(row))
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    rows = []
    for backend in ("", "EFFICIENT_ATTENTION"):  # the default CPU kernel, then the one CP's ring implements
        os.environ["ZP_SDPA_BACKEND"] = backend
        with tempfile.TemporaryDirectory() as out:
            mp.spawn(_worker, args=(CP, _free_port(), out), nprocs=CP, join=True)
            rows += [json.loads(Path(out, f"{r}.json").read_text()) for r in range(CP)]
    for row in rows:
        if row.get("runs"):
            row["zeroplan"] = predicted(CP)
        print(json.dumps(row), flush=True)
    OUT.write_text(json.dumps({"config": CONFIG, "batch": BATCH, "seq_len": SEQ, "torch": torch.__version__,
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
