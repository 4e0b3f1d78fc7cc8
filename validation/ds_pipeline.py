"""Run DeepSpeed's own pipeline schedule and layer-partition functions, no GPU and no deepspeed install needed, and
hold zeroplan's reading of them to what they do; writes validation/ds_pipeline.json (tests/test_ds_pipeline.py
checks zeroplan against it on every run).

    PYTHONPATH=$PWD /work/venv-hf/bin/python validation/ds_pipeline.py DS/deepspeed/runtime/pipe/schedule.py \\
        DS/deepspeed/runtime/utils.py      # DS: deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641

- TrainSchedule (pipe/schedule.py, run unchanged; only its `from ..utils import call_to_str` is served by a stand-in
  module, call_to_str being the instructions' repr): for pp in PPS and m in MICRO, each stage's command stream is
  walked in order as PipelineEngine._exec_schedule runs it. A micro-batch's buffer is "alive" from its ForwardPass
  until its BackwardPass (the stage's saved activations and pipe_buffers['outputs']); a received input from
  RecvActivation until SendGrad (pipe_buffers['inputs'], engine.py _exec_send_grads frees it). Recorded per stage:
  the most forwards alive at once, the most received inputs held, num_pipe_buffers(), and whether a buffer slot
  was ever reused while alive.
- partition_uniform / partition_balanced (runtime/utils.py, the two functions' source taken unchanged with ast and
  run with numpy): on seeded random weight lists (ties and zeros included) and on zeroplan's PipelineModule items
  of the presets (zeroplan.models.partition.module_items), the boundaries they return beside zeroplan's.
"""

from __future__ import annotations

import ast
import json
import random
import sys
import types
from pathlib import Path

from zeroplan.models import partition as zp
from zeroplan.models.presets import load_model

OUT = Path(__file__).resolve().parent / "ds_pipeline.json"
SOURCE = "deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641"
PPS, MICRO = (2, 3, 4, 8), (1, 2, 3, 4, 6, 8, 12, 16)
PRESETS = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen3-30b-a3b", "gemma2-2b", "mixtral-8x7b")
PRESET_PPS = (2, 4, 8, 16)
METHODS = ("parameters", "uniform", "type:transformer")


def load_schedule(path: Path) -> types.ModuleType:
    utils = types.ModuleType("dsp.utils")  # deepspeed.runtime.utils, of which schedule.py takes call_to_str only
    utils.call_to_str = lambda name, *args, **kwargs: f"{name}({args}, {kwargs})"
    for name in ("dsp", "dsp.pipe"):
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = []
    sys.modules["dsp.utils"] = utils
    module = types.ModuleType("dsp.pipe.schedule")
    module.__package__ = "dsp.pipe"
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


def load_partitions(path: Path) -> dict:
    tree = ast.parse(path.read_text())
    wanted = {"partition_uniform", "partition_balanced"}
    funcs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in wanted]
    namespace: dict = {}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), str(path), "exec"), namespace)
    return {name: namespace[name] for name in wanted}


def walk(sched_mod, pp: int, m: int, stage: int) -> dict:
    sched = sched_mod.TrainSchedule(micro_batches=m, stages=pp, stage_id=stage)
    alive, inputs, peak_alive, peak_inputs, reused = set(), set(), 0, 0, False
    for cmds in sched:
        for cmd in cmds:
            kind, buf = type(cmd).__name__, getattr(cmd, "buffer_id", None)
            if kind == "ForwardPass":
                reused |= buf in alive
                alive.add(buf)
            elif kind == "BackwardPass":
                alive.discard(buf)
            elif kind == "RecvActivation":
                reused |= buf in inputs
                inputs.add(buf)
            elif kind == "SendGrad":
                inputs.discard(buf)
            peak_alive, peak_inputs = max(peak_alive, len(alive)), max(peak_inputs, len(inputs))
    return {"pp": pp, "m": m, "stage": stage, "forwards_alive": peak_alive, "inputs_held": peak_inputs,
            "num_pipe_buffers": sched.num_pipe_buffers(), "slot_reused_while_alive": reused}


def random_cases(funcs: dict) -> dict:
    rng, cases, mismatches = random.Random(15), 0, []
    for _ in range(3000):
        n, parts = rng.randint(1, 30), rng.randint(1, 10)
        weights = [rng.choice((0, 1, 1, 2, 3, 5, 8, 100)) for _ in range(n)]
        theirs = [int(x) for x in funcs["partition_balanced"](weights=weights, num_parts=parts)]
        ours = list(zp.partition_balanced(weights, parts))
        cases += 1
        if theirs != ours:
            mismatches.append({"weights": weights, "parts": parts, "deepspeed": theirs, "zeroplan": ours})
    for n in range(0, 40):
        for parts in range(1, 12):
            theirs = [int(x) for x in funcs["partition_uniform"](num_items=n, num_parts=parts)]
            ours = list(zp.partition_uniform(n, parts))
            cases += 1
            if theirs != ours:
                mismatches.append({"n": n, "parts": parts, "deepspeed": theirs, "zeroplan": ours})
    return {"cases": cases, "mismatches": mismatches}


def preset_cases(funcs: dict) -> list[dict]:
    rows = []
    for name in PRESETS:
        dec = load_model(name).config.decoder()
        params, flags = zp.module_items(dec)
        for pp in PRESET_PPS:
            for method in METHODS:
                weights = zp.layer_weights(method, params, flags)
                bounds = (funcs["partition_uniform"](num_items=len(params), num_parts=pp) if weights is None
                          else funcs["partition_balanced"](weights=weights, num_parts=pp))
                bounds = [int(x) for x in bounds]
                layers = [sum(flags[bounds[s]:bounds[s + 1]]) for s in range(pp)]
                rows.append({"model": name, "pp": pp, "method": method, "deepspeed_bounds": bounds,
                             "deepspeed_layers": layers, "zeroplan_layers": list(zp.stage_layer_split(dec, pp, method))})
    return rows


def main(schedule_py: str, utils_py: str) -> None:
    sched_mod = load_schedule(Path(schedule_py))
    funcs = load_partitions(Path(utils_py))
    schedule = [walk(sched_mod, pp, m, s) for pp in PPS for m in MICRO for s in range(pp)]
    data = {"source": SOURCE, "schedule": schedule, "partition_random": random_cases(funcs),
            "partition_presets": preset_cases(funcs)}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    bad = sum(r["deepspeed_layers"] != r["zeroplan_layers"] for r in data["partition_presets"])
    print(f"{len(schedule)} schedule rows; {data['partition_random']['cases']} random partitions, "
          f"{len(data['partition_random']['mismatches'])} differ; {len(data['partition_presets'])} preset splits, "
          f"{bad} differ -> {OUT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
