"""One training step as a sequence of events, each with the bytes alive at its high-water mark; the peak is the largest.

start of step -> forward of layer 0..L-1 -> end of forward (head and loss) -> backward of the loss ->
backward of layer L-1..0 -> backward of the embedding -> optimizer step.

An engine describes the step without activations as a tuple of Moments (its skeleton: parameters, gradients,
optimizer states, buffers and temporaries alive, and which activations are), built once per StageBase; an
ActivationProfile (one micro-step's activations, by part) completes it. Activations follow autograd: a
layer's saved tensors live from its forward to its backward; the logits and the loss until the loss's
backward; a checkpointed layer's recompute only inside its own backward. Pure: no I/O. docs/engines.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

CATEGORIES = ("parameters", "gradients", "optimizer_states", "buffers", "activations", "temporaries")
START, END_OF_FORWARD, LOSS_BACKWARD, EMBEDDING_BACKWARD, STEP = (
    "start of step", "end of forward", "backward of the loss", "backward of the embedding", "optimizer step")
FULL_GRADIENT_TERM = "largest layer full gradient"  # memory.buffers: ZeRO-3's, alive only in the backward


def forward_name(layer: int) -> str:
    return f"forward of layer {layer}"


def backward_name(layer: int) -> str:
    return f"backward of layer {layer}"


@dataclass(frozen=True, slots=True)
class Moment:
    """One event of the step without its activations: what the engine holds, and which activations are alive.

    grads_accumulated: the gradients when earlier micro-steps of the same optimizer step already produced theirs
    (gradient accumulation keeps them); `layers` is how many layers' saved activations are alive.
    """

    name: str
    phase: str  # start | forward | backward | step
    layer: int | None
    parameters: int
    gradients: int
    grads_accumulated: int
    optimizer_states: int
    buffers: int = 0
    temporaries: int = 0
    layers: int = 0
    embedding: bool = False
    head: bool = False
    loss: bool = False
    recompute: bool = False
    loss_backward: bool = False  # the loss's own backward (log_softmax's and nll_loss's), the logits freed
    # What an engine's own streams keep reserved (memory.engines.streams), and the part of it this event's buffers
    # hold; the rest less the gradients (allocated on such a stream) is cached there: reserved, not allocated
    stream_pool: int = 0
    stream_live: int = 0

    def stream_cached(self, accumulating: bool) -> int:
        grads = self.grads_accumulated if accumulating else self.gradients
        return max(0, self.stream_pool - self.stream_live - grads) if self.stream_pool else 0


@dataclass(frozen=True, slots=True)
class ActivationProfile:
    """One micro-step's activations by part (zeroplan.memory.activations), and whether gradients accumulate."""

    layers_bytes: int = 0  # all layers' saved tensors, spread evenly over the layers
    embedding: int = 0  # embedding outputs, ids, masks: alive from the first forward to the last backward
    head: int = 0  # final norm, logits, soft-capping: until the loss's backward
    loss: int = 0  # cross-entropy's saved tensors and the fp32 copy of the logits: the forward's peak
    recompute: int = 0  # what a checkpointed layer's recompute allocates inside its backward
    accumulating: bool = False  # grad_accum > 1: the last micro-step starts with every gradient produced
    num_layers: int = 0  # the model's layers (encoder and decoder); 0 for a bare parameter count
    layer_prefix: tuple[int, ...] = ()  # bytes of layers 0..k-1 at [k], when each layer's are known
    held: int = 0  # of layers_bytes, what the checkpointed layers re-read: alive while any layer is
    transient: int = 0  # alive inside one layer's forward or backward only (a 4-bit base's dequantized weight)
    head_transient: int = 0  # alive while the head's matmul runs: in its forward, before the loss's, and backward
    reference: int = 0  # a reference model's no-grad forward (DPO, memory.reference): at the end of the policy's
    # --training-loop litgpt (memory.activations.loop): the previous micro-step's tensors the loop holds, from the step's
    # start to the end of this forward; the compute-dtype logits beside them while Fabric casts the logits to fp32;
    # this micro-step's logits the loop holds after the loss's backward, through the backward and the optimizer step
    carried: int = 0
    handoff: int = 0
    loop_held: int = 0
    # The loss's backward at its high-water mark less the logits, which the loop has dropped by then (HF Trainer's
    # compute_loss returns the loss alone; torchtitan's train.py `del pred`): in place of the head's logits
    loss_backward: int = 0
    # Reserved, not allocated, at the loss's backward (memory.engines.streams.reserved_terms): the freed logits' block
    loss_hole: int = 0
    start: int = 0  # a no-grad forward before the policy's (ASFT's reference, memory.posttrain): at the step's start
    forward_held: int = 0  # what that forward leaves alive through the policy's forward (its logits), loss included
    # --float8 (memory.float8): the casts' transients inside one layer's forward, and inside one layer's backward
    float8_forward: int = 0
    float8_backward: int = 0

    def layers_alive(self, layers: int, num_layers: int) -> int:
        """Bytes of the first `layers` of `num_layers` layers' activations (evenly split without layer_prefix)."""
        if len(self.layer_prefix) == num_layers + 1:
            return self.layer_prefix[layers] + (self.held if layers else 0)
        return self.layers_bytes * layers // num_layers

    def strictly_rising(self, num_layers: int) -> bool:
        """Each more layer alive adds at least one byte (so the most layers alive is the unique largest)."""
        if len(self.layer_prefix) == num_layers + 1:
            return all(b < a for b, a in zip(self.layer_prefix, self.layer_prefix[1:]))
        return self.layers_bytes >= max(num_layers, 1)

    @property
    def total_forward(self) -> int:
        return self.layers_bytes + self.embedding + self.head + self.loss

    @classmethod
    def lump(cls, total: int, accumulating: bool = False) -> ActivationProfile:
        """A bare activation total: taken as alive from the first forward to the last backward (the old rule)."""
        return cls(embedding=total, accumulating=accumulating)


def profile_from(acts, arch, setup) -> ActivationProfile:
    """The profile of an ActivationEstimate: per-part bytes as memory.activations reports them.

    Each layer's own bytes where activations lists them (`layer_bytes`: every:N keeps more for the layers it
    does not checkpoint), the masks the recompute re-reads (`held_bytes`) while any layer is alive. The recompute
    inside a checkpointed layer's backward is recompute_bytes plus the loss transient it was netted against
    (activations counts only what exceeds it: it is freed before the backward starts).
    """
    accumulating = setup.grad_accum > 1
    if acts is None:
        return ActivationProfile(accumulating=accumulating)
    if not hasattr(acts, "layers_bytes"):  # an activation model that gives only its total
        return ActivationProfile.lump(acts.total_bytes, accumulating)
    recompute = acts.recompute_bytes + acts.loss_transient_bytes if acts.recompute_bytes else 0
    prefix = [0]
    for b in acts.layer_bytes:
        prefix.append(prefix[-1] + b)
    # DeepSpeed's pipe buffers (memory.pipeengine) are alive the whole step, as the embedding's outputs are
    embedding = acts.embedding_bytes + getattr(acts, "pipe_buffer_bytes", 0)
    return ActivationProfile(layers_bytes=acts.layers_bytes, embedding=embedding,
                             num_layers=arch.num_layers + arch.num_encoder_layers,
                             head=acts.final_norm_bytes + acts.logits_bytes + acts.logit_softcap_bytes,
                             loss=acts.loss_bytes, recompute=recompute, accumulating=accumulating,
                             layer_prefix=tuple(prefix), held=acts.held_bytes,
                             transient=getattr(acts, "dequant_bytes", 0),
                             head_transient=getattr(acts, "head_dequant_bytes", 0),
                             float8_forward=getattr(acts, "float8_forward_bytes", 0),
                             float8_backward=getattr(acts, "float8_backward_bytes", 0),
                             carried=getattr(acts, "carried_bytes", 0), handoff=getattr(acts, "handoff_bytes", 0),
                             loop_held=getattr(acts, "loop_held_bytes", 0),
                             loss_backward=max(0, getattr(acts, "loss_backward_bytes", 0) - acts.logits_bytes),
                             # a loop that holds the logits (litgpt) frees no block beside them
                             loss_hole=acts.logits_bytes if getattr(acts, "loss_backward_bytes", 0)
                             and acts.loss_transient_bytes and not getattr(acts, "loop_held_bytes", 0) else 0)


@dataclass(frozen=True, slots=True)
class Event:
    """One event with the bytes of each category alive at its high-water mark (CATEGORIES order)."""

    name: str
    phase: str
    layer: int | None
    bytes: tuple[int, int, int, int, int, int]

    @property
    def total(self) -> int:
        return sum(self.bytes)

    def by_category(self) -> dict[str, int]:
        return dict(zip(CATEGORIES, self.bytes))


@dataclass(frozen=True, slots=True)
class Timeline:
    events: tuple[Event, ...]
    peak_index: int

    @property
    def peak(self) -> Event:
        return self.events[self.peak_index]


def _activations(m: Moment, prof: ActivationProfile, num_layers: int) -> int:
    # Without layer events (a model of one unit), the layers' activations live as long as the embedding's.
    layers = prof.layers_alive(m.layers, num_layers) if num_layers else prof.layers_bytes * m.embedding
    # the head's matmul and the loss run one after the other: the end of the forward holds the larger of the two,
    # as does the loss's backward (its own tensors, then the head matmul's backward); a loop's carried tensors die
    # when the forward returns, before the loss (memory.activations.loop)
    ends = (max(prof.loss * m.loss, prof.head_transient * m.head, prof.loss_backward * m.loss_backward)
            + prof.reference * m.loss)
    if prof.carried and m.loss:
        # the head's matmul runs before Fabric's fp32 copy exists (only the compute-dtype logits do), the copy is
        # made beside them (none in fp32), then the forward returns and the loss runs
        ends = max(ends, prof.carried + prof.head_transient - (prof.loop_held - prof.handoff),
                   prof.carried + (prof.handoff if prof.handoff < prof.loop_held else 0))
    carried = prof.carried if m.phase in ("start", "forward") and not m.loss else 0
    held = prof.loop_held if m.phase in ("backward", "step") and not m.head else 0
    return (layers + prof.embedding * m.embedding + prof.head * m.head + ends + carried + held
            + prof.recompute * m.recompute + prof.transient * (m.layer is not None) + _float8(m, prof)
            + prof.start * (m.phase == "start") + prof.forward_held * (m.phase == "forward"))


def _float8(m: Moment, prof: ActivationProfile) -> int:
    """A layer's float8 casts (memory.float8): its forward's; its backward's, or a recomputed forward's if larger."""
    if m.layer is None or m.phase not in ("forward", "backward"):
        return 0
    if m.phase == "forward":
        return prof.float8_forward
    return max(prof.float8_backward, prof.float8_forward if m.recompute else 0)


def _static(m: Moment, accumulating: bool) -> int:
    grads = m.grads_accumulated if accumulating else m.gradients
    return m.parameters + grads + m.optimizer_states + m.buffers + m.temporaries


def peak_of(skeleton: tuple[Moment, ...], num_layers: int, prof: ActivationProfile) -> tuple[int, int, int]:
    """(index, bytes) of the first event with the most bytes alive, and the most of any event before the step.

    Exactly a scan of every event, done over groups (events alike but for how many layers' activations are
    alive: DeepSpeed's forward and backward layers): with at least one byte per layer the most layers win, with
    none the earliest does; a sweep evaluates a handful of events instead of two per layer.
    """
    best, index, before_step = -1, 0, 0
    for members in _groups(skeleton):
        if len(members) > 1 and (prof.layers_bytes == 0 or prof.strictly_rising(num_layers)):
            members = (members[-1],) if prof.layers_bytes else (min(members),)  # the group's first largest
        for i in members:
            m = skeleton[i]
            total = _static(m, prof.accumulating) + _activations(m, prof, num_layers)
            if total > best or (total == best and i < index):
                best, index = total, i
            if m.phase != "step" and total > before_step:
                before_step = total
    return index, best, before_step


_GROUPS: dict[int, tuple[tuple[Moment, ...], list[tuple[int, ...]]]] = {}


def _groups(skeleton: tuple[Moment, ...]) -> list[tuple[int, ...]]:
    """Indices of the skeleton's events grouped by everything but `layers`, each group in rising `layers` and order."""
    cached = _GROUPS.get(id(skeleton))
    if cached is not None and cached[0] is skeleton:
        return cached[1]
    groups: dict[tuple, list[int]] = {}
    for i, m in enumerate(skeleton):
        key = (m.phase, _static(m, False), _static(m, True), m.embedding, m.head, m.loss, m.recompute,
               m.loss_backward, m.layer is not None)  # carried and held follow phase, head and loss
        groups.setdefault(key, []).append(i)
    ordered = [tuple(sorted(g, key=lambda i: (skeleton[i].layers, -i))) for g in groups.values()]
    # within a group a later event with as many layers alive is never the first largest: keep rising layers only
    out = []
    for g in ordered:
        kept: list[int] = []
        for i in g:
            if kept and skeleton[kept[-1]].layers == skeleton[i].layers:
                kept[-1] = min(kept[-1], i)
            else:
                kept.append(i)
        out.append(tuple(kept))
    if len(_GROUPS) > 512:
        _GROUPS.clear()
    _GROUPS[id(skeleton)] = (skeleton, out)
    return out
def build_timeline(skeleton: tuple[Moment, ...], num_layers: int, prof: ActivationProfile) -> Timeline:
    events = []
    for m in skeleton:
        grads = m.grads_accumulated if prof.accumulating else m.gradients
        acts = _activations(m, prof, num_layers)
        events.append(Event(m.name, m.phase, m.layer,
                            (m.parameters, grads, m.optimizer_states, m.buffers, acts, m.temporaries)))
    index, _, _ = peak_of(skeleton, num_layers, prof)
    return Timeline(tuple(events), index)


def step_moments(num_layers: int, at) -> list[Moment]:
    """The events of a step in order; at(name, phase, layer, **activations) makes each Moment."""
    out = [at(START, "start", None)]
    out += [at(forward_name(i), "forward", i, layers=i + 1, embedding=True) for i in range(num_layers)]
    out.append(at(END_OF_FORWARD, "forward", None, layers=num_layers, embedding=True, head=True, loss=True))
    out.append(at(LOSS_BACKWARD, "backward", None, layers=num_layers, embedding=True, head=True, loss_backward=True))
    out += [at(backward_name(i), "backward", i, layers=i + 1, embedding=True, recompute=True)
            for i in reversed(range(num_layers))]
    out.append(at(EMBEDDING_BACKWARD, "backward", None, embedding=True))
    out.append(at(STEP, "step", None))
    return out


@lru_cache(maxsize=256)
def deepspeed_skeleton(base, num_layers: int) -> tuple[Moment, ...]:
    """DeepSpeed: model states and always-alive buffers throughout (it allocates its gradient partitions up
    front: stage_1_and_2.py / stage3.py contiguous buffers); backward-phase buffers in the forward and backward
    (gathered ZeRO-3 parameters), the largest layer's full gradient only in a backward; step-phase buffers are
    the optimizer step's temporaries."""
    s = base.states
    always, _, step = base.buffer_bytes
    grad_terms = sum(t.bytes for t in base.buffers if t.phase.value == "backward" and t.name == FULL_GRADIENT_TERM)
    live = sum(t.bytes for t in base.buffers if t.phase.value == "backward") - grad_terms

    def at(name, phase, layer, **acts):
        extra = 0 if phase in ("start", "step") else live
        if phase == "backward":
            extra += grad_terms
        return Moment(name, phase, layer, s.parameters, s.gradients, s.gradients, s.optimizer_states,
                      buffers=always + extra, temporaries=step if phase == "step" else 0, **acts)

    return tuple(step_moments(num_layers, at))


def skeleton_of(base, prof: ActivationProfile) -> tuple[tuple[Moment, ...], int]:
    """The base's own moments (PyTorch engines build theirs from the wrapping), else DeepSpeed's for the profile's layers."""
    step = base.moments[-1] if base.moments else None
    # A base changed after its moments were built (memory.tuned, memory.paged replace its states) reads by the
    # phase rule DeepSpeed's skeleton follows: model states throughout, its lines by phase.
    if step is not None and (step.parameters, step.optimizer_states, step.grads_accumulated) == (
            base.states.parameters, base.states.optimizer_states, base.states.gradients):
        return base.moments, base.moment_layers
    return deepspeed_skeleton(base, prof.num_layers), prof.num_layers
