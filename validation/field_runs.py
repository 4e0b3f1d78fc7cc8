"""Measured runs from the field against zeroplan: regenerates docs/validation.md from validation/field_runs.yaml.

    python validation/field_runs.py          # write docs/validation.md
    python validation/field_runs.py --check  # exit 1 if docs/validation.md is not what the data gives now

Each run zeroplan can express is estimated with `zeroplan estimate ARGS -f json` (in-process, through the CLI
itself) and compared with its measured per-GPU peak. The figure compared depends on what was measured, since
the counters see different things (docs/validation.md, "What is compared"):

- nvidia-smi (or NVML) and unstated counters: zeroplan's whole peak, plus what it reports reserved beyond the peak
  (`reserved_beyond_peak`: FSDP2's stream pools, which the caching allocator keeps for those streams);
- max_memory_reserved: the same less the CUDA context and NCCL buffers, which live outside PyTorch's allocator;
- peak_memory_active / max_memory_allocated: the peak less all of zeroplan's overhead (context, NCCL and the
  allocator's fragmentation margin).

A run whose counter was never reset since the model was built (`counter_covers: load`: litgpt prints
torch.cuda.max_memory_allocated() once, after training) is compared with the larger of the step's figure and the
load's (load_peak_bytes), each from the stack's source; every other counter covers the training steps only.

A run that waits on an option zeroplan does not have yet names it in `needs` (e.g. ["--float8"]); it is compared
as soon as every option it names exists in `zeroplan estimate` and it carries its `zeroplan` arguments, and is
listed with what it waits on until then.

The figures and the page are validation/field_runs_report.py's. The data is not tuned to zeroplan and zeroplan is not tuned to it: a run is listed whether it agrees or not.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "validation" / "field_runs.yaml"
DOC = ROOT / "docs" / "validation.md"
GIB = 2**30
KINDS = ("max_memory_reserved", "max_memory_allocated", "peak_memory_active", "nvidia-smi", "unstated")
OUTSIDE_ALLOCATOR = ("CUDA context", "NCCL buffers")  # zeroplan's overhead lines PyTorch's allocator never sees
COVERS = ("load",)  # counter_covers: what a counter saw beyond the training steps
# Lightning 2.4.0 (litgpt@00af8b0 pins lightning==2.4.0.dev20240728; lit-gpt@8641822 pins
# Lightning@71aed751f7f0ca8422ddca256e602099070f490b, the same path):
# src/lightning/fabric/plugins/precision/bitsandbytes.py `_Linear4bit.__init__` quantizes each layer as it is built
# on the GPU, and `_quantize_on_load_hook` as its checkpoint weight arrives: the layer's bf16 weight (2 B) and its
# `weight.contiguous().to(device="cuda", dtype=torch.half)` copy (2 B) are alive while bitsandbytes packs it.
LOAD_QUANTIZE_TRANSIENT_BYTES = 4
CATEGORIES = {  # key in the YAML: the row's label in docs/validation.md
    "full": "full fine-tune / pre-train",
    "lora": "LoRA (or another adapter) on a 16-bit base",
    "qlora": "QLoRA (4-bit base)",
    "fsdp": "FSDP (FSDP1 or FSDP2)",
    "deepspeed": "DeepSpeed ZeRO",
    "mesh": "TP / PP / CP (mesh)",
    "compile_float8": "torch.compile / float8",
}

def load(path: Path = DATA) -> list[dict]:
    """The runs, each checked for the fields the table needs; ValueError names the first run that lacks one."""
    runs = yaml.safe_load(path.read_text(encoding="utf-8"))["runs"]
    for run in runs:
        _check(run)
    return runs


def _check(run: dict) -> None:
    where = run.get("id", "?")
    for key in ("id", "source", "row", "setup", "measured_gib", "measurement", "expressible", "categories"):
        if key not in run:
            raise ValueError(f"{where}: no {key}")
    if run["measurement"] not in KINDS:
        raise ValueError(f"{where}: measurement {run['measurement']!r} is not one of {', '.join(KINDS)}")
    if not str(run["source"].get("url", "")).startswith("https://"):
        raise ValueError(f"{where}: its source has no https URL")
    unknown = set(run["categories"] or ["(none)"]) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"{where}: categories {sorted(unknown)} are not among {', '.join(CATEGORIES)}")
    if run["expressible"] and not run.get("zeroplan"):
        raise ValueError(f"{where}: expressible but no zeroplan arguments")
    if run["expressible"] and run.get("needs"):
        raise ValueError(f"{where}: expressible today but needs {run['needs']}")
    if not run["expressible"] and not run.get("why"):
        raise ValueError(f"{where}: not expressible but no why")
    if run.get("counter_covers") not in (None, *COVERS):
        raise ValueError(f"{where}: counter_covers {run['counter_covers']!r} is not one of {', '.join(COVERS)}")


@lru_cache(maxsize=1)
def estimate_options() -> frozenset[str]:
    """Every option `zeroplan estimate` takes today (its click parameters' spellings)."""
    from typer.main import get_command

    from zeroplan.cli.app import app

    command = get_command(app).commands["estimate"]
    return frozenset(opt for p in command.params for opt in (*p.opts, *p.secondary_opts))


def compared(run: dict, options: frozenset[str] | None = None) -> bool:
    """True when zeroplan is run on this run: expressible today, or every option it waits on has landed."""
    if run["expressible"]:
        return True
    needs = run.get("needs") or []
    return bool(needs and run.get("zeroplan")) and set(needs) <= (options or estimate_options())


def waits_on(run: dict, options: frozenset[str] | None = None) -> str:
    """The options a run not compared waits on, flagged when they have all landed but its arguments are not given."""
    needs = run.get("needs") or []
    if not needs:
        return "-"
    landed = set(needs) <= (options or estimate_options())
    return ", ".join(needs) + (" (now in zeroplan: map the run's arguments)" if landed and not run.get("zeroplan") else "")


def estimate(args: list[str]) -> dict:
    """zeroplan's estimate document for one run, through the CLI."""
    from typer.testing import CliRunner

    from zeroplan.cli.app import app

    res = CliRunner().invoke(app, ["estimate", *args, "-f", "json"])
    if res.exit_code != 0:
        raise RuntimeError(f"zeroplan estimate {' '.join(args)} failed: {res.output.strip()}")
    return json.loads(res.stdout)


def compared_bytes(stage: dict, measurement: str) -> int:
    """The part of zeroplan's peak that the measurement's counter sees."""
    total = stage["gpu_bytes"]["total"]
    reserved = sum(t["bytes"] for t in stage.get("reserved_beyond_peak", []))  # FSDP2's stream pools
    if measurement in ("nvidia-smi", "unstated"):
        return total + reserved
    if measurement == "max_memory_reserved":
        return total + reserved - sum(t["bytes"] for t in stage["overhead"] if t["name"] in OUTSIDE_ALLOCATOR)
    return total - stage["gpu_bytes"]["overhead"]


def load_peak_bytes(args: list[str], stage: dict) -> int | None:
    """What litgpt's counter sees while the model is built and its checkpoint loaded, one GPU: every parameter as it
    stays for training (zeroplan's `parameters`: 16-bit, or NF4 and its quant state), plus under --qlora the largest
    linear's bf16 weight and fp16 copy while Lightning quantizes it (LOAD_QUANTIZE_TRANSIENT_BYTES). A 16-bit run
    loads in place: litgpt@00af8b0:litgpt/utils.py load_checkpoint lazy_loads the checkpoint on the CPU and
    load_state_dict copies each tensor into the parameter already on the GPU. None on several GPUs: Fabric's FSDP
    load (load_raw under FULL_STATE_DICT, each FSDP unit unsharded in turn) is not modelled here."""
    from zeroplan.models.named import linears, named_parameters, tied_head
    from zeroplan.models.presets import load_model

    if int(args[args.index("--gpus") + 1]) > 1:
        return None
    resident = stage["gpu_bytes"]["parameters"]
    if "--qlora" not in args:
        return resident
    spec = load_model(args[args.index("--model") + 1])
    lins = linears(named_parameters(spec)) + [h for h in [tied_head(spec)] if h]
    return resident + LOAD_QUANTIZE_TRANSIENT_BYTES * max(lin.n_in * lin.n_out for lin in lins)


def compare(run: dict) -> dict:
    args = [str(ROOT / a) if str(a).startswith("validation/") else str(a) for a in run["zeroplan"]]  # from any cwd
    doc = estimate(args)
    (stage,) = doc["stages"]  # each run names its --stage
    step = compared_bytes(stage, run["measurement"])
    load = load_peak_bytes(args, stage) if run.get("counter_covers") == "load" else None  # None: not modelled
    predicted = max(step, load or 0)
    measured = run["measured_gib"] * GIB
    return {"predicted_gib": predicted / GIB, "error": (predicted - measured) / measured, "total_gib": stage["gpu_bytes"]["total"] / GIB,
            "activations_gib": stage["gpu_bytes"]["activations"] / GIB, "zeroplan_version": doc["zeroplan_version"],
            "step_gib": step / GIB, "load_gib": None if load is None else load / GIB}


def results_for(runs: list[dict]) -> dict[str, dict]:
    """compare() of every run zeroplan is run on, by id."""
    options = estimate_options()
    return {r["id"]: compare(r) for r in runs if compared(r, options)}


def main(argv: list[str]) -> int:
    from field_runs_report import render  # the page (it imports this module's constants)

    runs = load()
    results = results_for(runs)
    text = render(runs, results)
    if "--check" in argv:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC.relative_to(ROOT)} is stale: run python validation/field_runs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}: {len(results)} runs compared, {len(runs) - len(results)} not expressible")
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(ROOT / "validation")]
    raise SystemExit(main(sys.argv[1:]))
