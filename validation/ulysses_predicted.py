"""zeroplan's side of validation/measure_ulysses.py: the cases it measures and zeroplan's activations for one rank.

Torch-free, so tests/test_ulysses_measured.py checks the committed measurements against the current zeroplan.
"""

from __future__ import annotations

from validation.tp_predicted import BATCH, CONFIG, SEQ

__all__ = ["BATCH", "CASES", "SEQ", "case_batch", "case_config", "predicted"]

# The tiny Llama of validation/measure_tp.py (8 heads, 4 kv heads: GQA), its MHA (8 kv heads) and MQA (1 kv head)
# twins; "plain" is one GPU with transformers' own attention and positions (the baseline the gap is read against);
# sp 8 on GQA and sp 4 on MQA run DeepSpeed's kv replication (kv heads < sp).
CASES = {
    "plain": {"sp": 1, "kv": 4, "plain": True},  # no Ulysses, no position_ids: the single-GPU baseline
    "gqa-sp2": {"sp": 2, "kv": 4},
    "gqa-sp4": {"sp": 4, "kv": 4},
    "gqa-sp8": {"sp": 8, "kv": 4},
    "mha-sp2": {"sp": 2, "kv": 8},
    "mha-sp4": {"sp": 4, "kv": 8},
    "mqa-sp4": {"sp": 4, "kv": 1},
    "gqa-sp4-b1": {"sp": 4, "kv": 4, "batch": 1},  # one sequence: the rotary tables are what they are on one GPU
}


def case_config(name: str) -> tuple[dict, bool]:
    """The case's transformers LlamaConfig keys and whether HF gradient checkpointing is on."""
    case = CASES[name]
    return {**CONFIG, "num_key_value_heads": case["kv"]}, case.get("checkpointing") == "full"


def case_batch(name: str) -> int:
    return CASES[name].get("batch", BATCH)


def predicted(name: str) -> int:
    """zeroplan's activations for one rank of `--cp sp --cp-comm a2a` (fp32, flash/SDPA kernels, the whole stack)."""
    from zeroplan.memory.activations.mesh import rank_activations
    from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
    from zeroplan.models.families import parse_family_config
    from zeroplan.models.mesh import CpComm, Mesh

    config, full = case_config(name)
    sp = CASES[name]["sp"]
    arch = parse_family_config({"model_type": "llama", **config}, strict=False).architecture()
    setup = TrainingSetup(precision=Precision.fp32, seq_len=SEQ, micro_batch=case_batch(name), attention=Attention.flash,
                          checkpointing=Checkpointing.full if full else Checkpointing.none)
    mesh = Mesh(gpus=sp, cp=sp, cp_comm=CpComm.a2a) if sp > 1 else Mesh(gpus=1)
    return rank_activations(arch, setup, mesh)[0].total_bytes
