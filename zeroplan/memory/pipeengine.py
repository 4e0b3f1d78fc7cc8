"""DeepSpeed's PipelineEngine on a pipeline mesh: the ZeRO stages it runs and the pipe buffers it keeps.

Sources: deepspeedai/DeepSpeed@edaa7221 deepspeed/runtime/pipe/engine.py (PipelineEngine) and pipe/schedule.py
(TrainSchedule). Per stage r of pp, with n micro-batches in flight (TrainSchedule's 1F1B: n = min(pp - r, m), the
count validation/ds_pipeline.py read off DeepSpeed's own schedule), PipelineEngine keeps, beside what autograd
saves in the stage's layers:
- its received input (stages after the first): `_exec_recv_activations` stores a clone of the receive buffer in
  pipe_buffers['inputs'] until `_exec_send_grads` sends its gradient after the backward; the forward runs on a
  second clone (`_exec_forward_pass`: inputs.clone()), which is what the first layer saves, so the stored one is
  extra: n x b s h in the activation dtype;
- its output (stages before the last): pipe_buffers['outputs'] holds the stage's output tensor from the forward
  until the backward (`_exec_backward_pass` frees it), and nothing in the stage saves it: n x b s h;
- one receive buffer (pipe_recv_buf, stages after the first) and one gradient buffer (grad_layer, stages before
  the last), each b s h, allocated once and reused.
Token ids and labels (int64, b s on the first and last stages) and the input gradient a backward makes before
`_exec_send_grads` sends it (b s h, one at a time) are left out. Pipe partitioning (tp > 1) is not
modelled: AutoTP with PipelineEngine is refused. Pure: no I/O.
"""

from __future__ import annotations

# PipelineEngine.__init__, word for word
PIPE_ZERO_ASSERTION = "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
PIPE_ZERO_MAX = 1  # assert self.zero_optimization_stage() < ZeroStageEnum.gradients
RECEIVE_BUFFERS = 1  # pipe_recv_buf on a stage after the first, grad_layer on one before the last: one each


def pipe_zero_refusal(stage: int, pp: int) -> str | None:
    """Why DeepSpeed's PipelineEngine will not run ZeRO `stage` (None: it runs it)."""
    if stage <= PIPE_ZERO_MAX:
        return None
    return (f"ZeRO-{stage} with DeepSpeed's PipelineEngine (pipeline.stages {pp}): DeepSpeed asserts "
            f"'{PIPE_ZERO_ASSERTION}' (deepspeed/runtime/pipe/engine.py); use stage 0 or 1")


def pipe_buffer_bytes(rank: int, pp: int, in_flight: int, boundary_bytes: int) -> int:
    """Bytes PipelineEngine's buffers hold on pipeline rank `rank` at its peak (module docstring):

        (n + 1) B [r > 0]  +  (n + 1) B [r < pp - 1],   B = b s h e, one micro-batch's stage boundary tensor.
    """
    held = in_flight + RECEIVE_BUFFERS
    return held * boundary_bytes * ((rank > 0) + (rank < pp - 1))
