"""Run Megatron-LM's own theoretical_memory_usage.py on a set of cases and write the test vectors.

Usage: python validation/megatron_reference.py MEGATRON_LM_CHECKOUT [--out tests/data/megatron/vectors.json]

Needs neither torch nor Megatron's dependencies: the file is loaded as it is, in a scratch package beside a
two-function stand-in for its `.utils` (is_hybrid_model -> False, print_rank_0 records which activation
formula report_theoretical_memory chose). Each case is a set of Megatron arguments: the ones zeroplan maps
from its presets and a mesh (zeroplan.megatron.mapping; the vectors keep the preset and mesh, so the tests
check the mapping too), and hand-written ones for what no preset reaches (MoE with shared experts, MLA, MTP,
latent MoE, a layer-frequency list). report_theoretical_memory returns MiB; x 2**20 gives Megatron's bytes
back exactly (a power of two).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import subprocess
import sys
import tempfile
import types
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zeroplan.megatron.mapping import Mesh, megatron_args  # noqa: E402
from zeroplan.models.presets import load_model  # noqa: E402

MIB = 2**20
STUB = '''
chosen = []
def is_hybrid_model(args):
    return False
def print_rank_0(message):
    chosen.append(message)
'''

# (preset, mesh, seq_len, micro_batch, distributed optimizer, recompute, micro-batches)
PRESET_CASES = [
    ("llama-3.1-8b", Mesh(gpus=8), 4096, 1, False, None, 1),
    ("llama-3.1-8b", Mesh(gpus=8, tp=2, sequence_parallel=True), 8192, 2, True, "selective", 4),
    ("llama-3.1-70b", Mesh(gpus=64, tp=8, pp=2, sequence_parallel=True), 8192, 1, True, "selective", 16),
    ("llama-3.1-70b", Mesh(gpus=64, tp=8, pp=4, vpp=2, sequence_parallel=True), 4096, 1, True, "selective", 32),
    ("llama-3.1-405b", Mesh(gpus=896, tp=8, pp=7, cp=2, sequence_parallel=True), 8192, 1, True, "selective", 8),
    ("llama-3.1-405b", Mesh(gpus=504, tp=8, pp=9), 4096, 1, False, "full", 4),
    ("mixtral-8x7b", Mesh(gpus=64, tp=2, pp=4, ep=8, sequence_parallel=True), 4096, 1, True, "selective", 8),
    ("mixtral-8x7b", Mesh(gpus=16, tp=1, ep=8, etp=1), 4096, 2, False, None, None),
    ("gpt2-xl", Mesh(gpus=4), 1024, 8, False, None, 1),
    ("qwen2.5-72b", Mesh(gpus=32, tp=4, pp=2, sequence_parallel=True), 32768, 1, True, "full", 2),
    ("gemma2-9b", Mesh(gpus=8, tp=4, sequence_parallel=True), 8192, 1, False, "selective", 1),
]

_DENSE = dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_query_groups=8,
              group_query_attention=True, kv_channels=128, swiglu=True, normalization="RMSNorm",
              padded_vocab_size=128256, untie_embeddings_and_output_weights=True, add_bias_linear=False,
              world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, context_parallel_size=1,
              expert_model_parallel_size=1, expert_tensor_parallel_size=2, virtual_pipeline_model_parallel_size=None,
              data_parallel_size=4, use_distributed_optimizer=True, sequence_parallel=True,
              recompute_granularity="selective", seq_length=4096, micro_batch_size=1)
# DeepSeek-V3's shape as Megatron's DeepSeek-V3 recipe launches it: MLA, 3 dense layers, 256 routed + 1 shared
# expert, 1 MTP layer (layer pattern as a list, expert parallelism 8).
_MLA_MOE = dict(_DENSE, num_layers=61, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
                num_query_groups=128, group_query_attention=False, kv_channels=128, padded_vocab_size=129280,
                num_experts=256, moe_ffn_hidden_size=2048, moe_router_topk=8,
                moe_layer_freq=[0] * 3 + [1] * 58, moe_shared_expert_intermediate_size=2048, mtp_num_layers=1,
                multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                qk_pos_emb_head_dim=64, v_head_dim=128, world_size=256, tensor_model_parallel_size=1,
                pipeline_model_parallel_size=16, expert_model_parallel_size=8, expert_tensor_parallel_size=1,
                data_parallel_size=16)
HAND_CASES = [
    ("dense, no pipeline, no distributed optimizer", dict(_DENSE, pipeline_model_parallel_size=1,
                                                          data_parallel_size=8, use_distributed_optimizer=False), 1),
    ("dense, 1F1B with fewer micro-batches than stages", dict(_DENSE, pipeline_model_parallel_size=4,
                                                              data_parallel_size=2), 3),
    ("dense, micro-batches not given", dict(_DENSE), None),
    ("MoE, shared expert with its gate, router bias, every other layer", dict(
        _DENSE, num_experts=64, moe_ffn_hidden_size=1408, moe_router_topk=6, moe_layer_freq=2,
        moe_shared_expert_intermediate_size=5632, moe_shared_expert_gate=True, add_bias_linear=True,
        expert_model_parallel_size=4, expert_tensor_parallel_size=1), 8),
    ("MoE, latent projection", dict(_DENSE, num_experts=16, moe_ffn_hidden_size=2048, moe_router_topk=2,
                                    moe_latent_size=1024, expert_model_parallel_size=2), 4),
    ("DeepSeek-V3-shaped: MLA, dense-then-MoE list, MTP", _MLA_MOE, 16),
    ("MLA without q compression, LayerNorm", dict(_MLA_MOE, q_lora_rank=None, normalization="LayerNorm"), 16),
]


def load_megatron(checkout: Path) -> types.ModuleType:
    source = checkout / "megatron" / "training" / "theoretical_memory_usage.py"
    scratch = Path(tempfile.mkdtemp()) / "megatron_theory"
    scratch.mkdir()
    (scratch / "__init__.py").write_text("")
    (scratch / "utils.py").write_text(STUB)
    (scratch / "theoretical_memory_usage.py").write_text(source.read_text())
    sys.path.insert(0, str(scratch.parent))
    return importlib.import_module("megatron_theory.theoretical_memory_usage")


def run_case(theory: types.ModuleType, args: dict, num_microbatches: int | None) -> dict:
    chosen = sys.modules["megatron_theory.utils"].chosen
    chosen.clear()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its figures in MB
        weights_mib, activations_mib, _ = theory.report_theoretical_memory(types.SimpleNamespace(**args),
                                                                           num_microbatches=num_microbatches)
    return {"weight_and_optimizer_bytes": weights_mib * MIB, "activation_bytes": activations_mib * MIB,
            "activation_formula": "with_sp" if chosen == ["compute_activation_memory with SP"] else "without_sp"}


def megatron_namespace(args: dict) -> dict:
    """Megatron's optional MoE/MLA arguments at their argparse defaults where a case leaves them out."""
    defaults = dict(num_experts=None, moe_ffn_hidden_size=None, moe_router_topk=2, moe_layer_freq=1,
                    moe_shared_expert_intermediate_size=None, moe_shared_expert_gate=False, moe_latent_size=None,
                    mtp_num_layers=None, multi_latent_attention=False, q_lora_rank=None, kv_lora_rank=0,
                    qk_head_dim=0, qk_pos_emb_head_dim=0, v_head_dim=0)
    return defaults | args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help="a Megatron-LM checkout")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "megatron" / "vectors.json")
    opts = parser.parse_args()
    theory = load_megatron(opts.checkout)
    commit = subprocess.run(["git", "-C", str(opts.checkout), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    cases = []
    for preset, mesh, seq, mb, distributed, recompute, micro in PRESET_CASES:
        args = asdict(megatron_args(load_model(preset).architecture(), mesh, seq_len=seq, micro_batch=mb,
                                    distributed_optimizer=distributed, recompute=recompute))
        degrees = [f"{k} {v}" for k, v in asdict(mesh).items() if type(v) is int and v > 1 and k != "gpus"]
        degrees = ", ".join(degrees + ["sequence parallel"] * mesh.sequence_parallel)
        name = f"{preset} on {mesh.gpus} GPUs" + (f" ({degrees})" if degrees else "")
        cases.append({"name": name, "preset": preset, "mesh": asdict(mesh), "seq_len": seq,
                      "micro_batch": mb, "distributed_optimizer": distributed, "recompute": recompute,
                      "num_microbatches": micro, "args": args, **run_case(theory, args, micro)})
    for name, args, micro in HAND_CASES:
        full = megatron_namespace(args)
        cases.append({"name": name, "num_microbatches": micro, "args": full, **run_case(theory, full, micro)})
    opts.out.write_text(json.dumps({
        "source": f"NVIDIA/Megatron-LM@{commit}:megatron/training/theoretical_memory_usage.py",
        "made_by": "validation/megatron_reference.py", "cases": cases}, indent=1) + "\n")
    print(f"{len(cases)} cases -> {opts.out}")


if __name__ == "__main__":
    main()
