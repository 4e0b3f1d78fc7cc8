"""What the memory model reads of a model: its counts as a ModelSummary, and the small tensors ZeRO-3 keeps whole.

Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.memory.setup import DeepSpeedKnobs
from zeroplan.memory.states import ModelSummary
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.models.params.modules import LAYERNORM_TENSORS

T5_ENCODER_NORMS_PER_LAYER = 2  # self-attention + feed-forward
T5_FINAL_NORMS = 2  # encoder and decoder final norms


def norm_param_numel(arch: Architecture) -> int:
    """Elements in normalization weights (and biases): the small tensors ZeRO-3 keeps whole.

    Decoder layers x norms_per_layer + one final norm (+ the encoder's for T5), x hidden x (2 LayerNorm | 1 RMSNorm).
    Biases of projections are left out (small next to norms in every supported family but GPT-2/OPT/BLOOM).
    """
    per_norm = arch.hidden_size * (LAYERNORM_TENSORS if arch.norm == "layernorm" else 1)
    norms = arch.num_layers * arch.norms_per_layer + 1
    if arch.num_encoder_layers:
        norms += arch.num_encoder_layers * T5_ENCODER_NORMS_PER_LAYER + T5_FINAL_NORMS - 1
    return norms * per_norm


def small_param_numel(arch: Architecture | None, knobs: DeepSpeedKnobs) -> int:
    """Elements ZeRO-3 keeps whole on every GPU: the norms, when the hidden size is under the persistence threshold."""
    if arch is not None and arch.hidden_size <= knobs.stage3_param_persistence_threshold:
        return norm_param_numel(arch)
    return 0


def param_count(model: ModelSummary) -> ParamCount:
    """The counts the throughput model reads, back from a ModelSummary; a bare count is dense (active = all)."""
    return ParamCount(num_params=model.num_params, num_embedding_params=model.num_embedding_params,
                      largest_layer_params=model.largest_layer_params,
                      num_active_params=model.num_active_params or model.num_params)


def summarize_model(name: str, counts: ParamCount, arch: Architecture | None, knobs: DeepSpeedKnobs) -> ModelSummary:
    """The counts the memory model reads, from an exact ParamCount and its architecture."""
    return ModelSummary(
        name=name,
        num_params=counts.num_params,
        largest_layer_params=counts.largest_layer_params,
        num_embedding_params=counts.num_embedding_params,
        num_active_params=counts.num_active_params,
        small_param_numel=small_param_numel(arch, knobs),
        count_notes=counts.notes,
    )
