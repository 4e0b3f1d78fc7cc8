"""zeroplan's side of validation/measure_pp.py: the model and batch it measures, and zeroplan's figures for one
pipeline rank.

Torch-free, so tests/test_pp_measured.py checks the committed measurements against the current zeroplan.
"""

from __future__ import annotations

CONFIG = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=8, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, vocab_size=256, tie_word_embeddings=False,
              max_position_embeddings=512, attention_dropout=0.0)
MICRO_BATCH, SEQ = 2, 64


def _inputs():
    from zeroplan.memory.setup import Attention, Precision, TrainingSetup
    from zeroplan.models.families import parse_family_config

    config = parse_family_config({"model_type": "llama", **CONFIG}, strict=False)

    def setup(m: int) -> TrainingSetup:
        return TrainingSetup(precision=Precision.fp32, seq_len=SEQ, micro_batch=MICRO_BATCH,
                             attention=Attention.flash, grad_accum=m)
    return config, setup


def predicted(pp: int, m: int, rank: int) -> dict:
    """zeroplan's figures for pipeline rank `rank` of a 1F1B run (fp32, AdamW, no data parallelism): its stage's
    parameter and gradient bytes, its saved activations (the stage's micro-batches in flight), its total (those plus
    what PyTorch's pipelining keeps beside them, memory/pipelining.py) and the count in flight."""
    from zeroplan.memory.activations.mesh import in_flight, stage_activations
    from zeroplan.memory.mesh import share_states, stage_shares
    from zeroplan.memory.recipes import make_recipe
    from zeroplan.memory.setup import Optimizer, Precision, ZeroStage
    from zeroplan.models.mesh import Mesh

    config, setup = _inputs()
    mesh = Mesh(gpus=pp, pp=pp)
    share = stage_shares(config.decoder(), mesh)[rank]
    states = share_states(share, mesh, make_recipe(Precision.fp32, Optimizer.adamw), ZeroStage.zero0)
    acts, _ = stage_activations(config.architecture(), setup(m), mesh)
    return {"parameters": states.parameters, "gradients": states.gradients,
            "activations": acts[rank].total_bytes - acts[rank].pipe_buffer_bytes, "total": acts[rank].total_bytes,
            "in_flight": in_flight(mesh, m)[rank]}


def one_micro_batch(pp: int, rank: int) -> int:
    """zeroplan's activations of one micro-batch on pipeline rank `rank` (its stage with one micro-batch in flight)."""
    from zeroplan.memory.activations.mesh import stage_activations
    from zeroplan.models.mesh import Mesh

    config, setup = _inputs()
    one = stage_activations(config.architecture(), setup(1), Mesh(gpus=pp, pp=pp))[0][rank]
    return one.total_bytes - one.pipe_buffer_bytes


def rank_states(pp: int, stages: list[int]) -> dict:
    """zeroplan's parameter, gradient and AdamW bytes (fp32, no data parallelism) for a pipeline rank holding
    `stages` of len(stages) x pp equal stages (one: 1F1B, GPipe; two: the interleaved and V placements)."""
    from zeroplan.memory.mesh import share_states, stage_shares
    from zeroplan.memory.recipes import make_recipe
    from zeroplan.memory.setup import Optimizer, Precision, ZeroStage
    from zeroplan.models.mesh import Mesh

    config, _ = _inputs()
    mesh = Mesh(gpus=pp * len(stages), pp=pp * len(stages))
    shares = stage_shares(config.decoder(), mesh)
    found = [share_states(shares[i], mesh, make_recipe(Precision.fp32, Optimizer.adamw), ZeroStage.zero0)
             for i in stages]
    return {"parameters": sum(s.parameters for s in found), "gradients": sum(s.gradients for s in found),
            "optimizer": sum(s.optimizer_states for s in found)}


def predicted_rank(pp: int, m: int, schedule: str, rank: int) -> dict:
    """zeroplan's activation figures for pipeline rank `rank` under any measured schedule (vpp 2 for the looped
    interleaved ones, zbv's V): `activations`, the rank's total (saved tensors + what PyTorch's pipelining keeps
    beside them, memory/pipelining.py), and `pipelining`, that last term alone."""
    from zeroplan.memory.activations.mesh import stage_activations
    from zeroplan.models.mesh import Mesh, Schedule

    config, setup = _inputs()
    kind = Schedule(schedule)
    vpp = 2 if kind in (Schedule.interleaved, Schedule.interleaved_zero_bubble) else None
    acts, _ = stage_activations(config.architecture(), setup(m), Mesh(gpus=pp, pp=pp, vpp=vpp, schedule=kind))
    return {"activations": acts[rank].total_bytes, "pipelining": acts[rank].pipe_buffer_bytes}
