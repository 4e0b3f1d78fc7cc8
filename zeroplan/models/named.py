"""Every parameter tensor of a model under its Hugging Face name, and the linears an adapter can target.

The names are what `AutoModelForCausalLM.from_config(config).named_parameters()` yields (transformers 5.x,
modeling_<family>.py), one entry per tensor with its shape (nn.Linear's weight is (out, in)); a tied LM head
is not listed, as named_parameters() lists a shared tensor once. validation/measure_finetune.py checks names,
shapes and counts against transformers. This is the small interface the fine-tuning modes read
(zeroplan.memory.finetune): `named_parameters` and `linears`.
Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from zeroplan.errors import ZeroplanError
from zeroplan.models import families as fam
from zeroplan.models.params.decoder import decoder_modules, layer_modules
from zeroplan.models.params.modules import COLUMN, EMBEDDING_KIND, EXPERTS_KIND, LINEAR, ROW, Module

Shape = tuple[int, ...]


class NamedParam(NamedTuple):
    """One parameter tensor: its full HF name, shape, and the nn.Module that owns it."""

    name: str  # e.g. model.layers.0.self_attn.q_proj.weight
    shape: Shape
    module: str  # e.g. model.layers.0.self_attn.q_proj
    linear: bool = False  # owned by an nn.Linear (what peft's LoRA wraps)
    features: tuple[int, int] = (0, 0)  # a linear's (in_features, out_features); GPT-2's Conv1D stores (in, out)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class Linear(NamedTuple):
    """One nn.Linear: its HF module name, in and out features, and whether it has a bias."""

    name: str
    n_in: int
    n_out: int
    bias: bool


LINEAR_KINDS = (COLUMN, ROW, LINEAR)  # nn.Linear / Conv1D modules (routers are TopKRouter modules, not nn.Linear)
EXPERT_TENSORS = {2: ("gate_up_proj", "down_proj"),  # transformers 5 fused experts, as zeroplan.models.block lays them
                  4: ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")}
SUFFIXES = ("weight", "bias")


def _tensors(m: Module, index: int | None) -> list[NamedParam]:
    """The tensors of one module instance (`index` fills the `*` of a layer's module)."""
    module = m.name if index is None else m.name.replace("*", str(index), 1)
    linear = m.kind in LINEAR_KINDS or (m.kind == EMBEDDING_KIND and m.in_features > 0)
    names = m.tensors or (EXPERT_TENSORS.get(len(m.shapes), SUFFIXES) if m.kind == EXPERTS_KIND else SUFFIXES)
    features = (m.in_features, m.out_features)
    return [NamedParam(f"{module}.{name}", shape, module, linear, features) for name, shape in zip(names, m.shapes)]


def named_parameters(spec: fam.ModelSpec) -> list[NamedParam]:
    """The model's parameter tensors in named_parameters() naming, layer by layer (inside a layer the order may
    differ: transformers lists a module's own tensors before its children's, and registers routers and experts in
    each family's order); ZeroplanError for a family described without a Decoder (T5). A module's tensors are
    .weight/.bias unless its description names them (Module.tensors: sinks, dt_bias, A_log)."""
    dec = spec.config.decoder()
    if dec is None:
        raise ZeroplanError(f"{spec.name}: fine-tuning modes need the decoder description of family "
                            f"{spec.architecture().family}, which it does not have")
    top = [m for m in decoder_modules(dec) if "*" not in m.name and not m.tied]
    head = [m for m in top if m.name == dec.head or m.name.endswith(("." + (dec.final_norm or ""),))]
    out = [p for m in top if m not in head for p in _tensors(m, None)]
    index = 0
    for layer, count in dec.layers:
        modules = [m for m in layer_modules(layer, dec) if m is not None]
        for _ in range(count):
            out += [p for m in modules for p in _tensors(m, index)]
            index += 1
    return out + [p for m in head for p in _tensors(m, None)]


OUTPUT_HEAD = "lm_head"  # get_output_embeddings(): peft's all-linear leaves it out


def tied_head(spec: fam.ModelSpec) -> Linear | None:
    """The output head of a model that ties it to the embedding (absent from named_parameters, which lists the shared
    weight once), as the nn.Linear peft wraps when `lm_head` is a LoRA target; None when the head is untied."""
    dec = spec.config.decoder()
    if dec is None or not dec.tie_word_embeddings:
        return None
    head = next((m for m in decoder_modules(dec) if m.name == dec.head and m.tied), None)
    return None if head is None else Linear(head.name, head.in_features, head.out_features, False)


def linears(params: list[NamedParam]) -> list[Linear]:
    """The nn.Linear modules of a parameter list, in order: name, in, out, bias."""
    found: dict[str, Linear] = {}
    for p in params:
        if not p.linear:
            continue
        if p.name.endswith(".weight"):
            n_in, n_out = p.features if p.features[0] else (p.shape[1], p.shape[0])
            found[p.module] = Linear(p.module, n_in, n_out, False)
        else:
            found[p.module] = found[p.module]._replace(bias=True)
    return list(found.values())
