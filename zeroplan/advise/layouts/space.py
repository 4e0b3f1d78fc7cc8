"""The layouts the parallelism search weighs: which tp x pp x cp (x ep) meshes a model lays out on over a GPU count,
which stack runs each one, and why the others are left out.

Degrees (docs/advisor.md, "Parallelism search"):
- tp: powers of two dividing the attention heads and the key-value heads (Megatron-LM's check, models/mesh.py),
  within one node by default (TP's per-layer all-reduces need the intra-node fabric: Narayanan et al. 2021,
  arXiv:2104.04473, section 3.3, "tensor model parallelism within a node");
- pp: divisors of the GPU count the layers split into: evenly where they divide; else torchtitan's default uneven
  split (models/mesh.py split_problems), up to pp 16 (UNEVEN_PP_MAX: the most Llama 3 405B ran, Dubey et al. 2024,
  arXiv:2407.21783, Table 4; it keeps the 405B search under its 2 s budget);
- cp: divisors of the sequence length, with flash attention only (ring attention, memory/activations/mesh.py);
- torchtitan's tp > 1 only with the Hugging Face loss (its vocab-parallel loss is modelled for it only; AutoTP's
  logits are whole);
- ep (MoE): divisors of the expert count that divide dp x cp (the experts' own data-parallel group, memory/mesh.py);
- dp = GPUs / (tp x pp x cp), which must divide the global batch (micro-batch x accumulation x dp = global batch).
Stacks: DeepSpeed (AutoTP, `tensor_parallel.autotp_size`) runs tp x dp only; torchtitan runs every mesh.
Schedules: every mesh is weighed under 1F1B; a torchtitan mesh with pp > 1 also under interleaved 1F1B with v
virtual stages per rank (virtual_stages: 2, torchtitan's default for a multi-stage schedule, and the VPP_LARGEST
largest v that split and that torchtitan can be told), weighed by the search for the pipelined 1F1B
configurations that could still win (search._interleave).
Pure.
"""

from __future__ import annotations

import math

from collections import Counter
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from zeroplan.memory.setup import Attention, Checkpointing, Loss, ZeroStage
from zeroplan.models.architecture import Architecture
from zeroplan.models.mesh import Mesh, Schedule, mesh_problems, split_problems

UNEVEN_PP_MAX = 16  # docstring: uneven pipeline splits searched up to this many stages
# Besides v = 2, the largest this many virtual-stage counts are weighed: under interleaved 1F1B the bubble is
# (p - 1) / (v m) (Narayanan et al. 2021, arXiv:2104.04473, 2.2) and the in-flight activations
# L / p x (p + (p - 1) / v) layers (Korthikanti et al. 2022, arXiv:2205.05198, 4.2.3) both fall as v grows, while
# the point-to-point sends grow as v: the largest v bound what interleaving can save, 2 what it costs least in sends.
VPP_LARGEST = 2


class Stack(str, Enum):
    """What runs a layout, and so which config the search writes for it."""

    auto = "auto"  # DeepSpeed where pp = cp = ep = 1, torchtitan otherwise
    deepspeed = "deepspeed"  # DeepSpeed AutoTP + ZeRO (tp x dp)
    torchtitan = "torchtitan"  # torchtitan's FSDP2 + TP (+ PP, CP, EP)


# DeepSpeed AutoTP training runs ZeRO 0-3: stage 3 since v0.19.4 (deepspeedai/DeepSpeed@eec237ee8, PR #8168,
# runtime/engine.py _configure_tensor_parallel_states; v0.19.3 asserted stage <= 2).
DEEPSPEED_STAGES = tuple(ZeroStage)
# torchtitan has no ZeRO-1: data_parallel_replicate_degree is DDP (ZeRO-0), data_parallel_shard_degree FSDP2 with
# fsdp_reshard_after_forward "never" (ZeRO-2) or "always" (ZeRO-3) (pytorch/torchtitan@238fa99:
# torchtitan/config/job_config.py, Parallelism). With cp > 1 it shards over dp x cp (dp_shard_cp) even without
# data_parallel_shard_degree, so no ZeRO-0 there.
TORCHTITAN_STAGES = (ZeroStage.zero0, ZeroStage.zero2, ZeroStage.zero3)
# torchtitan's "selective" activation checkpointing is its per-op (or every n-th layer) policy, not Korthikanti's
# selective recompute that zeroplan's mesh model computes: only none and full are written for it.
TORCHTITAN_CHECKPOINTING = (Checkpointing.none, Checkpointing.full)
TWO_D_ONLY = "--engine fsdp2: FSDP2 is modelled on the 2-D (dp, tp) mesh only, not with pp, cp or ep above 1"
MESH_CHECKPOINTING = (Checkpointing.none, Checkpointing.selective, Checkpointing.full)  # what the mesh model computes


@dataclass(frozen=True, slots=True, order=True)
class Layout:
    """One mesh and the stack that runs it."""

    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    stack: Stack
    vpp: int = 1  # model chunks per pipeline rank: 1 under 1F1B, v under interleaved 1F1B

    @property
    def schedule(self) -> Schedule:
        return Schedule.interleaved if self.vpp > 1 else Schedule.one_f_one_b

    @property
    def sequence_parallel(self) -> bool:
        """torchtitan applies SequenceParallel to the norms whenever tp > 1; DeepSpeed AutoTP has none."""
        return self.stack is Stack.torchtitan and self.tp > 1

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    def mesh(self) -> Mesh:
        # DeepSpeed AutoTP replaces linears only: the token embedding whole, the head's logits all-reduced whole
        # (no tensor_parallel.vocab_parallel_lm_head is written); torchtitan is vocab-parallel (loss_parallel).
        vocab = self.stack is Stack.torchtitan
        return Mesh(gpus=self.model_parallel * self.dp, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep,
                    vpp=self.vpp if self.vpp > 1 else None, sequence_parallel=self.sequence_parallel,
                    vocab_parallel_embedding=vocab, vocab_parallel_logits=vocab)

    def stages(self) -> tuple[ZeroStage, ...]:
        if self.stack is Stack.deepspeed:
            return DEEPSPEED_STAGES
        return TORCHTITAN_STAGES if self.cp == 1 else TORCHTITAN_STAGES[1:]

    def levels(self, given: tuple[Checkpointing, ...]) -> tuple[Checkpointing, ...]:
        """The checkpointing levels of `given` (least recompute first) this stack can be told to run."""
        allowed = TORCHTITAN_CHECKPOINTING if self.stack is Stack.torchtitan else MESH_CHECKPOINTING
        kept = tuple(c for c in given if c in allowed)
        return kept or (Checkpointing.full,)

    def describe(self) -> str:
        parts = [f"tp {self.tp}", f"pp {self.pp}", f"cp {self.cp}"] + [f"ep {self.ep}"] * (self.ep > 1)
        sched = f", {self.schedule.value} vpp {self.vpp}" if self.vpp > 1 else ""
        return (" x ".join(parts + [f"dp {self.dp}"]) + f" ({self.stack.value}" + ", SP" * self.sequence_parallel
                + sched + ")")


def torchtitan_layers_per_stage(num_layers: int, pp: int, vpp: int) -> int | None:
    """The `pipeline_parallel_layers_per_stage` that makes torchtitan build pp x vpp virtual stages, or None.

    torchtitan builds ceil((L + w_first + w_last) / layers_per_stage) stages (pytorch/torchtitan@238fa99:
    torchtitan/distributed/pipeline_parallel.py pipeline_llm), with the weights zeroplan writes: 0 where L divides
    into the stages, else 1 (configs.torchtitan_sections, models.mesh.stage_layer_counts). The least candidate,
    ceil(E / S), is the one that can give S."""
    stages = pp * vpp
    effective = num_layers + (2 if num_layers % stages else 0)
    per = -(-effective // stages)
    return per if -(-effective // per) == stages else None


@lru_cache(maxsize=256)
def virtual_stages(num_layers: int, pp: int) -> tuple[int, ...]:
    """The interleaved virtual-stage counts weighed for pp ranks: 2 and the VPP_LARGEST largest v whose pp x v
    stages split (models.mesh.split_problems) and that torchtitan can be told (2 is its default; above it
    torchtitan_layers_per_stage must exist), ascending; empty for pp 1."""
    if pp < 2:
        return ()
    ok = [v for v in range(2, num_layers // pp + 1)
          if not split_problems(Mesh(gpus=pp, pp=pp, vpp=v), num_layers)
          and (v == 2 or torchtitan_layers_per_stage(num_layers, pp, v) is not None)]
    return tuple(sorted(set(ok[:1] if ok and ok[0] == 2 else []) | set(ok[-VPP_LARGEST:])))


@dataclass(frozen=True, slots=True)
class Space:
    """The layouts to weigh, the degrees each dimension took, and how many meshes each rule left out."""

    layouts: tuple[Layout, ...]
    degrees: dict[str, tuple[int, ...]]
    left_out: tuple[tuple[str, int], ...]  # (reason, meshes)


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending: pairs (d, n // d) up to the square root, so a million GPUs cost 1,000 steps."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


def tp_degrees(arch: Architecture, gpus: int, gpus_per_node: int, within_node: bool) -> list[int]:
    """Powers of two dividing the GPUs, the heads and the kv heads (and a node's GPUs, when within_node)."""
    limit = min(gpus, gpus_per_node) if within_node else gpus
    found, t = [], 1
    while t <= limit:
        if gpus % t == 0 and arch.num_attention_heads % t == 0 and arch.num_key_value_heads % t == 0:
            found.append(t)
        t *= 2
    return found


def stack_for(pp: int, cp: int, ep: int, asked: Stack) -> Stack | None:
    """The stack that runs a mesh: as asked, or (auto) DeepSpeed for tp x dp and torchtitan otherwise; None when the
    asked stack cannot run it (DeepSpeed has no pipeline or context parallelism with AutoTP)."""
    simple = pp == 1 and cp == 1 and ep == 1
    if asked is Stack.auto:
        return Stack.deepspeed if simple else Stack.torchtitan
    if asked is Stack.deepspeed and not simple:
        return None
    return asked


def enumerate_layouts(arch: Architecture, gpus: int, gpus_per_node: int, seq_len: int, attention: Attention,
                      global_batch: int, stack: Stack = Stack.auto, tp_within_node: bool = True,
                      loss: Loss = Loss.hf, two_d: bool = False) -> Space:
    """Every tp x pp x cp (x ep) mesh of `gpus` that `arch` lays out on, with its stack (the module docstring's
    rules); the meshes left out are counted by reason. two_d: (dp, tp) meshes only (FSDP2 as zeroplan models it)."""
    left: Counter[str] = Counter()
    tps = tp_degrees(arch, gpus, gpus_per_node, tp_within_node)
    pps = [p for p in divisors(gpus) if (arch.num_layers % p == 0 or p <= UNEVEN_PP_MAX)
           and not split_problems(Mesh(gpus=gpus, pp=p), arch.num_layers)]
    cps = [c for c in divisors(seq_len) if gpus % c == 0]
    if attention is not Attention.flash and len(cps) > 1:
        left[f"cp > 1 needs flash attention (ring attention), attention is {attention.value}"] += len(cps) - 1
        cps = [1]
    eps = [e for e in divisors(arch.num_experts) if gpus % e == 0] if arch.is_moe else [1]
    layouts = []
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                if global_batch % dp:
                    left[f"dp does not divide the global batch {global_batch}"] += 1
                    continue
                for ep in eps:
                    if two_d and (pp, cp, ep) != (1, 1, 1):
                        left[TWO_D_ONLY] += 1
                        continue
                    layouts += _with_stack(arch, tp, pp, cp, ep, dp, stack, left, loss)
    degrees = {"tp": tuple(tps), "pp": tuple(pps), "cp": tuple(cps), "ep": tuple(eps)}
    return Space(tuple(layouts), degrees, tuple(left.items()))


def _with_stack(arch: Architecture, tp: int, pp: int, cp: int, ep: int, dp: int, asked: Stack,
                left: Counter[str], loss: Loss = Loss.hf) -> list[Layout]:
    if (dp * cp) % ep:
        left["ep does not divide dp x cp (the experts' data-parallel group)"] += 1
        return []
    chosen = stack_for(pp, cp, ep, asked)
    if chosen is None:
        left["DeepSpeed AutoTP runs tp x dp only (--stack deepspeed): pp, cp or ep above 1"] += 1
        return []
    layout = Layout(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, stack=chosen)
    if loss is not Loss.hf and tp > 1 and chosen is Stack.torchtitan:  # memory/activations/mesh.py
        left[f"torchtitan tp > 1 with --loss {loss.value}: the vocab-parallel loss is modelled for --loss hf only"] += 1
        return []
    if found := mesh_problems(layout.mesh(), arch):  # the same checks `zeroplan estimate --tp ..` makes
        left[found[0]] += 1
        return []
    return [layout]
