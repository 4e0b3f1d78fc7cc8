"""DeepSpeed-Ulysses (context parallelism by all-to-all, `--cp N --cp-comm a2a`): what one rank saves beyond the
ring model's s/cp split, from DeepSpeed's UlyssesSPAttentionHF (the HF/ALST path a ds_config's
`sequence_parallel_size` drives; deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641:
deepspeed/runtime/sequence_parallel/ulysses_sp.py) and measured by validation/measure_ulysses.py.

Outside attention each rank holds s/sp tokens, as under ring attention. Around the core, _combine_local_sequences
all-to-alls q, k, v to a/sp heads over the whole sequence s and _partition_global_sequence all-to-alls the core's
output back to s/sp tokens; _DimZeroAllToAll (deepspeed/sequence/layer.py) saves nothing. So, per layer:
- q, k, v: the core saves the all-to-all outputs, e b s (a/sp + 2 max(g/sp, 1)) d, which is e b (s/sp)(a + 2 max(g,
  sp)) d: the ring model's e b (s/sp)(a + 2g) d when g >= sp; with g < sp DeepSpeed repeat_interleaves each kv head
  sp/g times (kv_replication_factor) and every rank keeps one whole-sequence kv head. A fused qkv projection's
  output is no longer kept: the core's inputs are the all-to-all's new tensors, not views of it.
- output projection input: the all-to-all's output [b, s/sp, a d] is a new tensor, so o_proj saves e b (s/sp) a d
  beside the core's own saved output (same bytes). On one GPU the two are one storage (SDPA's output layout is the
  one o_proj reads, memory.activations.attention.flash_output_copy), so this is Ulysses' own term, not a harness
  artefact.
- rotary tables: UlyssesSPDataLoaderAdapter requires position_ids in the batch, [b, s] per sample, so the cos and
  sin tables are [b, 1, s/sp, d], b times the [1, 1, s, d] of a run without them; the position ids a fully
  checkpointed layer re-reads are [b, s/sp] int64.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import ActivationEstimate, ActivationTerm
from zeroplan.memory.activations.attention import core_input_bytes, flash_output_copy
from zeroplan.memory.activations.llama4 import LLAMA4_FAMILIES
from zeroplan.memory.activations.loss import INDEX_BYTES
from zeroplan.memory.activations.terms import ROTARY_TERM, embedding_terms
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.setup import Checkpointing, TrainingSetup
from zeroplan.models.architecture import Architecture
from zeroplan.models.mesh import Mesh

A2A_OUTPUT = "output projection input (all-to-all output)"
KV_REPLICAS = "q, k, v: Ulysses all-to-all outputs beyond the s/cp split"


def check_ulysses(arch: Architecture, setup: TrainingSetup) -> None:
    """What zeroplan models under --cp-comm a2a: standard (not MLA, not hybrid linear) attention on every layer."""
    traits = traits_of(arch)
    if arch.is_mla or arch.linear_key_head_dim or arch.family in LLAMA4_FAMILIES or traits.eager_only:
        raise ZeroplanError(f"--cp-comm a2a (DeepSpeed-Ulysses) is modelled for standard attention; {arch.family}'s "
                            "attention is not modelled under it yet")
    if setup.checkpointing not in (Checkpointing.none, Checkpointing.full, Checkpointing.selective):
        raise ZeroplanError(f"--checkpointing {setup.checkpointing_label} with --cp-comm a2a is not modelled")


def layer_delta(arch: Architecture, setup: TrainingSetup, sp: int) -> list[tuple[str, int]]:
    """Per layer, what a Ulysses rank saves beyond the ring model's layer at s/sp tokens (module docstring)."""
    traits = traits_of(arch)
    b, s_local, e = setup.micro_batch, setup.seq_len // sp, setup.precision.compute_bytes
    t, a, g, d = b * s_local, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
    qkv = e * t * (a + 2 * max(g, sp)) * d - core_input_bytes(arch, traits, t, e)
    terms = [(KV_REPLICAS, qkv)]
    if not flash_output_copy(traits):  # else the ring model already counts the copy o_proj reads
        terms.append((A2A_OUTPUT, e * t * a * d))
    return [(n, v) for n, v in terms if v]


def ulysses_base(arch: Architecture, setup: TrainingSetup, mesh: Mesh, base: ActivationEstimate) -> ActivationEstimate:
    """`base` (the single-GPU estimate at s/sp tokens) with Ulysses' terms added: each layer's delta (in the
    recompute under full checkpointing, where a layer keeps only its input), b x the rotary tables, [b, s/sp]
    position ids held under full checkpointing."""
    check_ulysses(arch, setup)
    sp, b = mesh.cp, setup.micro_batch
    s_local, e = setup.seq_len // sp, setup.precision.compute_bytes
    delta = layer_delta(arch, setup, sp)
    extra = sum(v for _, v in delta)
    rotary = sum(v for n, v in embedding_terms(arch, traits_of(arch), b, s_local, e) if n == ROTARY_TERM)
    embedding = base.embedding_bytes + (b - 1) * rotary
    full = setup.checkpointing is Checkpointing.full
    terms = base.layer_terms + tuple(ActivationTerm(name=n, bytes=v) for n, v in delta)
    if full:
        held = base.held_bytes + (INDEX_BYTES * (b - 1) * s_local if rotary and base.held_bytes else 0)
        layers = base.layers_bytes + held - base.held_bytes
        return replace(base, recompute_bytes=base.recompute_bytes + extra, embedding_bytes=embedding,
                       held_bytes=held, layers_bytes=layers, layer_terms=terms,
                       total_bytes=base.total_bytes + extra + embedding - base.embedding_bytes + layers
                       - base.layers_bytes)
    each = tuple(x + extra for x in base.layer_bytes)
    layers = base.layers_bytes + extra * len(each)
    return replace(base, layers_bytes=layers, embedding_bytes=embedding, layer_bytes=each, layer_terms=terms,
                   per_layer_bytes=base.per_layer_bytes + extra,
                   total_bytes=base.total_bytes + layers - base.layers_bytes + embedding - base.embedding_bytes)
