"""zeroplan's side of validation/measure_tp.py: the model and batch it measures, and zeroplan's figures for one rank.

Torch-free, so tests/test_mesh_measured.py checks the committed measurements against the current zeroplan.
"""

from __future__ import annotations

CONFIG = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=4, head_dim=32, vocab_size=1024, tie_word_embeddings=False,
              max_position_embeddings=512, attention_dropout=0.0)
BATCH, SEQ = 2, 128


def predicted(tp: int, dp: int, sp: int = 0) -> dict:
    """zeroplan's figures for one rank of the same run (fp32, AdamW; FSDP2 = ZeRO-3 over dp; TP only = stage 0)."""
    from zeroplan.memory.activations.mesh import rank_activations
    from zeroplan.memory.mesh import share_states, stage_shares
    from zeroplan.memory.recipes import make_recipe
    from zeroplan.memory.setup import Attention, Optimizer, Precision, TrainingSetup, ZeroStage
    from zeroplan.models.families import parse_family_config
    from zeroplan.models.mesh import Mesh

    config = parse_family_config({"model_type": "llama", **CONFIG}, strict=False)
    mesh = Mesh(gpus=tp * dp, tp=tp, sequence_parallel=bool(sp))
    (share,) = stage_shares(config.decoder(), mesh)
    recipe = make_recipe(Precision.fp32, Optimizer.adamw)
    states = share_states(share, mesh, recipe, ZeroStage.zero3 if dp > 1 else ZeroStage.zero0)
    setup = TrainingSetup(precision=Precision.fp32, seq_len=SEQ, micro_batch=BATCH, attention=Attention.flash)
    acts, _ = rank_activations(config.architecture(), setup, mesh)
    return {"parameters": states.parameters, "gradients": states.gradients, "optimizer": states.optimizer_states,
            "activations": acts.total_bytes}


