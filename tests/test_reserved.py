"""What the allocator keeps reserved beyond the allocated peak (memory.engines.streams) and the loss's backward.

The stream pools are checked against validation/fsdp2_streams_measured.json (FSDP2 on CPU, gloo: which stream each
allocation is made on), the loss's backward against the same harness's measured step; field runs compare the
reserved counters with the peak plus what is reserved beyond it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import zeroplan
from zeroplan.memory.activations.loss import LOSS_BACKWARD_TENSORS, loss_bytes
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.engines.layout import ModelLayout, layout_for
from zeroplan.memory.engines.storage import Storage
from zeroplan.memory.engines.streams import LOSS_HOLE, STREAM_CACHE, all_gather_stream_bytes, reduce_stream_bytes
from zeroplan.memory.setup import Loss
from zeroplan.models.presets import load_model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))
import field_runs  # noqa: E402

# validation/measure_fsdp2_streams.py's model: hidden 64, 4 heads (2 kv), FFN 160, vocabulary 1003, 3 blocks
D, KV, FFN, VOCAB, LAYERS, TOKENS = 64, 32, 160, 1003, 3, 2 * 32
BLOCK = ((D, D), (KV, D), (KV, D), (D, D), (FFN, D), (FFN, D), (D, FFN), (D,), (D,))
LAYOUT = ModelLayout(root=((VOCAB, D), (D,), (VOCAB, D)), block=BLOCK, num_blocks=LAYERS)
MIXED = Storage(param=4, grad=4, optimizer=8, compute=2)
MEASURED = json.loads((ROOT / "validation" / "fsdp2_streams_measured.json").read_text())
TITAN = dict(model="llama-3.1-8b", hardware="h100-nvl-94gb", engine="fsdp2", stage=3, seq_len=8192, micro_batch=2,
             checkpointing="selective-op", attention="flash", reduce_dtype="fp32")


@pytest.mark.parametrize("row", MEASURED, ids=lambda r: f"N{r['N']}-{r['reduce_dtype']}")
def test_the_stream_pools_are_what_fsdp2_allocated_on_its_streams(row):
    reduce_bytes = {"fp32": 4, "bf16": 2}[row["reduce_dtype"]]
    assert reduce_stream_bytes(LAYOUT, row["N"], MIXED, reduce_bytes) == row["reduce_scatter_stream_measured"]
    assert all_gather_stream_bytes(LAYOUT, row["N"], MIXED, reshard=True) == row["copy_in_stream_measured"]
    assert row["reduce_scatter_alive_after_backward"] <= row["reduce_scatter_stream_measured"]


def test_one_rank_gathers_nothing_and_offload_keeps_one_unit():
    assert all_gather_stream_bytes(LAYOUT, 1, MIXED, reshard=True) == 0
    root_shard = 2 * -(-VOCAB // 2) * D + D // 2  # the root unit's dim-0 shards on 2 ranks (1003 rows pad to 1004)
    assert reduce_stream_bytes(LAYOUT, 2, MIXED, 2, offloaded=True) == root_shard * (2 + 4)
    assert reduce_stream_bytes(LAYOUT, 2, MIXED, 4, offloaded=True) == root_shard * 4


def test_the_loss_backward_holds_three_t_by_v_tensors_as_measured():
    arch = load_model("llama-3.1-8b").config.architecture()
    t, v = TOKENS, VOCAB
    from dataclasses import replace

    small = replace(arch, vocab_size=v, hidden_size=D)
    head = loss_bytes(small, traits_of(small), 2, 32, 2, Loss.hf)
    assert head.backward == LOSS_BACKWARD_TENSORS * 4 * t * v + 8 * t
    over = head.backward - (head.saved + head.transient + head.logits)  # the loss's backward over the forward's end
    assert {r["loss_backward_over_forward_measured"] for r in MEASURED} == {over}
    plain = loss_bytes(small, traits_of(small), 2, 32, 2, Loss.no_upcast)
    assert plain.backward == 3 * 2 * t * v + 8 * t
    for loss in (Loss.chunked, Loss.liger):
        assert loss_bytes(small, traits_of(small), 2, 32, 2, loss).backward == 0


def _titan(gpus: int):
    return zeroplan.estimate(gpus=gpus, **TITAN).stages[0]


def test_torchtitans_8b_step_peaks_at_the_loss_backward_with_its_pools_reserved_beyond():
    s = _titan(8)
    assert s.peak_moment == "backward of the loss"
    layout_pools = {t.name: t.bytes for t in s.reserved_beyond_peak}
    acts = zeroplan.estimate(gpus=8, **TITAN).activations
    assert layout_pools[LOSS_HOLE] == acts.logits_bytes  # e T V: 2 x 2 x 8192 x 128256
    assert layout_pools[STREAM_CACHE] > s.states.parameters  # fp32 gradients (= the fp32 parameters) + all-gathers
    assert s.total == s.peak_bytes + s.overhead_bytes  # not in the peak, nor in the fit
    few = _titan(128)  # the gradients' pool shrinks with N, the all-gather pool and the hole do not
    pools = {t.name: t.bytes for t in few.reserved_beyond_peak}
    assert pools[LOSS_HOLE] == layout_pools[LOSS_HOLE]
    grads = s.states.parameters - few.states.parameters  # fp32 grads are as large as the fp32 params
    block = layout_for(load_model("llama-3.1-8b")).block_numel  # the next all-gather's input: a block's bf16 shard
    assert layout_pools[STREAM_CACHE] - pools[STREAM_CACHE] == grads + 2 * block // 8 - 2 * block // 128


def test_no_pool_without_fsdp2_and_no_hole_without_the_upcast():
    ds = zeroplan.estimate(model="llama-3.1-8b", gpus=8, stage=3, seq_len=2048)
    assert [t.name for t in ds.stages[0].reserved_beyond_peak] in ([LOSS_HOLE], [])
    plain = zeroplan.estimate(model="llama-3.1-8b", gpus=8, stage=3, seq_len=2048, loss="no-upcast")
    assert plain.stages[0].reserved_beyond_peak == ()


def test_the_reserved_counters_see_what_is_reserved_beyond_the_peak():
    stage = {"gpu_bytes": {"total": 100, "overhead": 30},
             "overhead": [{"name": "CUDA context", "bytes": 5}, {"name": "NCCL buffers", "bytes": 10},
                          {"name": "fragmentation 5%", "bytes": 15}],
             "reserved_beyond_peak": [{"name": STREAM_CACHE, "bytes": 7}, {"name": LOSS_HOLE, "bytes": 3}]}
    assert field_runs.compared_bytes(stage, "nvidia-smi") == 110
    assert field_runs.compared_bytes(stage, "max_memory_reserved") == 95
    assert field_runs.compared_bytes(stage, "max_memory_allocated") == 70
