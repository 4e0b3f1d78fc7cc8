"""PyTorch's pipelining (torch.distributed.pipelining, as torchtitan runs it): what a PipelineStage keeps beside the
tensors autograd saves in its layers.

Source: torch 2.13.0, torch/distributed/pipelining/stage.py. Per pipeline rank, for each model chunk (a
PipelineStage) with global stage index s of S stages and n_k of its micro-batches in flight at the rank's peak:
- its outputs (s < S - 1): `forward_one_chunk` stores `fwd_cache[mb] = (output_tuple, input_values)` and
  `backward_one_chunk` pops it at that micro-batch's backward, so each in-flight micro-batch's output is alive
  until its backward; nothing in the stage saves it (the last layer's residual add saves nothing): n_k x B.
  Under zbv the output of stage pp - 1 goes to stage pp on the same rank (`set_local_fwd_input`), where it becomes
  that stage's receive buffer (counted below), so it is not counted twice;
- its receive buffers: `PipelineStage._setup_forward_recv_info` allocates one activation buffer per micro-batch
  (s > 0) and `_setup_backward_recv_info` / `_create_grad_recv_info` one gradient buffer per micro-batch (s < S - 1),
  all m of each once, at the first step, kept for the run (`clear_runtime_states` clears only their .grad): m x B
  on each side it has;
- less what is counted twice: the activation buffer of an in-flight micro-batch is the stage's input, and the first
  layer saves that tensor itself when it checkpoints the layer (its input) or its norm saves its input as it comes
  (LayerNorm; an RMSNorm that upcasts, `.to(float32)`, does so only in fp32): n_k x B less on a stage s > 0. (Under
  the zero-bubble schedules a micro-batch past its input backward no longer saves it: measured, zeroplan is then
  up to 4 B under the term, B below.)
B = one micro-batch's boundary tensor, b x s/cp x h in the compute dtype, / tp under sequence parallelism (torchtitan's
plan shards the residual stream between blocks on the sequence, RowwiseParallel(output_layouts=Shard(1)), and
PipelineStage sends the local shard, `to_local_if_dtensor`). Left out: the first stage's token ids and the last
stage's labels (int64, b s), and an input gradient between its backward and its send (b s h, one at a time).
Measured by validation/measure_pp.py (docs/parallelism.md, "What PyTorch's pipelining keeps beside the saved
tensors"). Megatron-LM frees a sent output's data (deallocate_output_tensor) and keeps one receive buffer at a
time: none of this applies to --method megatron. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass


UPCASTING_NORMS = frozenset({"llama", "gemma", "olmo2"})  # the norm styles of ops.norm_bytes that upcast first


@dataclass(frozen=True, slots=True)
class StageBuffers:
    """One rank's terms, in bytes: the outputs fwd_cache holds, the receive buffers, and what overlaps its saved
    tensors (subtracted)."""

    outputs: int
    receive: int
    overlap: int

    @property
    def total(self) -> int:
        return self.outputs + self.receive - self.overlap


def input_saved(norm_style: str, compute_bytes: int, checkpointed: bool) -> bool:
    """Whether a stage's first layer saves the stage's input tensor itself (module docstring)."""
    if checkpointed:
        return True
    return norm_style not in UPCASTING_NORMS or compute_bytes == 4


def stage_buffers(stages: tuple[int, ...], counts: tuple[int, ...], num_stages: int, m: int, boundary: int, *,
                  saves_input: bool, local_handoff: int | None = None) -> StageBuffers:
    """The terms for a rank holding global `stages` with `counts` micro-batches in flight each (module docstring):

        outputs = B sum_k n_k [s_k < S - 1]     (less the same-rank handoff under zbv)
        receive = B m sum_k ([s_k > 0] + [s_k < S - 1])
        overlap = B sum_k n_k [s_k > 0]          (when the first layer saves its input)
    """
    outputs = sum(n for s, n in zip(stages, counts, strict=True) if s < num_stages - 1 and s != local_handoff)
    receive = m * sum((s > 0) + (s < num_stages - 1) for s in stages)
    overlap = sum(n for s, n in zip(stages, counts, strict=True) if s > 0) if saves_input else 0
    return StageBuffers(outputs=outputs * boundary, receive=receive * boundary, overlap=overlap * boundary)
