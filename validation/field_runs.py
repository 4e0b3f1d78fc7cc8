"""Measured runs from the field against zeroplan: regenerates docs/validation.md from validation/field_runs.yaml.

    python validation/field_runs.py          # write docs/validation.md
    python validation/field_runs.py --check  # exit 1 if docs/validation.md is not what the data gives now

Each run zeroplan can express is estimated with `zeroplan estimate ARGS -f json` (in-process, through the CLI
itself) and compared with its measured per-GPU peak. The figure compared depends on what was measured, since
the counters see different things (docs/validation.md, "What is compared"):

- nvidia-smi (or NVML) and unstated counters: zeroplan's whole peak;
- max_memory_reserved: the peak less the CUDA context and NCCL buffers, which live outside PyTorch's allocator;
- peak_memory_active / max_memory_allocated: the peak less all of zeroplan's overhead (context, NCCL and the
  allocator's fragmentation margin).

A run that waits on an option zeroplan does not have yet names it in `needs` (e.g. ["--float8"]); it is compared
as soon as every option it names exists in `zeroplan estimate` and it carries its `zeroplan` arguments, and is
listed with what it waits on until then.

The data is not tuned to zeroplan and zeroplan is not tuned to it: a run is listed whether it agrees or not.
"""

from __future__ import annotations

import json
import statistics
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
MISS = 0.25  # an error beyond this is a miss, and docs/validation.md gives its reason
WITHIN = 0.10  # the band the share-within goal counts
CATEGORIES = {  # key in the YAML: the row's label in docs/validation.md
    "full": "full fine-tune / pre-train",
    "lora": "LoRA on a 16-bit base",
    "qlora": "QLoRA (4-bit base)",
    "fsdp": "FSDP (FSDP1 or FSDP2)",
    "deepspeed": "DeepSpeed ZeRO",
    "mesh": "TP / PP / CP (mesh)",
    "compile_float8": "torch.compile / float8",
}
# Issue 23's goals, on this set: (what, the figure's key, the bound, True when the figure must stay at or below it)
GOALS = (("median abs error", "median", 0.08, True), ("share within 10 %", "within", 0.75, False))
CATEGORY_MEAN_FLOOR = -0.05  # no category's mean signed error below this (never systematically under)
QLORA_MEDIAN_CAP = 0.10


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
    if measurement in ("nvidia-smi", "unstated"):
        return total
    if measurement == "max_memory_reserved":
        return total - sum(t["bytes"] for t in stage["overhead"] if t["name"] in OUTSIDE_ALLOCATOR)
    return total - stage["gpu_bytes"]["overhead"]


def compare(run: dict) -> dict:
    doc = estimate([str(a) for a in run["zeroplan"]])
    (stage,) = doc["stages"]  # each run names its --stage
    predicted = compared_bytes(stage, run["measurement"])
    measured = run["measured_gib"] * GIB
    return {"predicted_gib": predicted / GIB, "error": (predicted - measured) / measured, "total_gib": stage["gpu_bytes"]["total"] / GIB,
            "activations_gib": stage["gpu_bytes"]["activations"] / GIB, "zeroplan_version": doc["zeroplan_version"]}


def summary(errors: list[float]) -> dict:
    """count, median |error|, share within 10 %, worst (signed, largest |error|) and mean signed error."""
    if not errors:
        return {"n": 0}
    return {"n": len(errors), "median": statistics.median(abs(e) for e in errors),
            "within": sum(abs(e) <= WITHIN for e in errors) / len(errors),
            "worst": max(errors, key=abs), "mean": statistics.fmean(errors)}


def by_category(runs: list[dict], results: dict[str, dict]) -> dict[str, dict]:
    """summary() of the compared runs, overall ("all") and per category."""
    rows = {"all": summary([results[r["id"]]["error"] for r in runs if r["id"] in results])}
    for key in CATEGORIES:
        rows[key] = summary([results[r["id"]]["error"] for r in runs if r["id"] in results and key in r["categories"]])
    return rows


def goals(rows: dict[str, dict]) -> list[tuple[str, str, bool]]:
    """Issue 23's goals on this set: (the goal, the figure, met)."""
    overall, out = rows["all"], []
    for what, key, bound, at_most in GOALS:
        value = overall.get(key)
        met = value is not None and (value <= bound if at_most else value >= bound)
        out.append((f"{what} {'<=' if at_most else '>='} {bound:.0%}", "-" if value is None else f"{value:.1%}", met))
    under = [k for k in CATEGORIES if rows[k]["n"] and rows[k]["mean"] < CATEGORY_MEAN_FLOOR]
    out.append((f"no category's mean signed error below {CATEGORY_MEAN_FLOOR:.0%}",
                "below: " + ", ".join(under) if under else "none below", not under))
    q = rows["qlora"].get("median")
    out.append((f"QLoRA median abs error <= {QLORA_MEDIAN_CAP:.0%}", "-" if q is None else f"{q:.1%}",
                q is not None and q <= QLORA_MEDIAN_CAP))
    return out


def _row(label: str, s: dict, total: int) -> str:
    if not s["n"]:
        return f"| {label} | {total} | 0 | - | - | - | - |"
    return (f"| {label} | {total} | {s['n']} | {s['median']:.1%} | {s['within']:.0%} | {s['worst']:+.1%} | "
            f"{s['mean']:+.1%}{' (under)' if s['mean'] < CATEGORY_MEAN_FLOOR else ''} |")


def _short(url: str) -> str:
    """owner/repo:path of a GitHub blob URL (its fragment kept), or the URL's host and path."""
    parts = url.split("/")
    if parts[2] == "github.com" and len(parts) > 7:
        return f"{parts[3]}/{parts[4]}:{'/'.join(parts[7:])}"
    return "/".join(parts[2:])


def render_summary(runs: list[dict], results: dict[str, dict]) -> list[str]:
    rows = by_category(runs, results)
    lines = ["## By category", "",
             "Each run counts in every category it belongs to (a QLoRA run under FSDP is in both), so the rows overlap. "
             "error = (zeroplan - measured) / measured; worst is the largest |error|, with its sign.", "",
             "| category | runs | compared | median abs error | within 10 % | worst | mean signed error |",
             "|---|---:|---:|---:|---:|---:|---:|", _row("**all**", rows["all"], len(runs))]
    for key, label in CATEGORIES.items():
        lines.append(_row(label, rows[key], sum(key in r["categories"] for r in runs)))
    idle = [label for key, label in CATEGORIES.items() if not rows[key]["n"]]
    if idle:
        lines += ["", f"No run is compared yet in: {'; '.join(idle)} (each one here waits on an option or lacks a stated "
                  "setting; see the last table). Tensor, pipeline and context parallelism are measured on CPU with "
                  "PyTorch's own APIs instead: [parallelism.md](parallelism.md#validated-pipeline-and-context-parallelism)."]
    lines += ["", "By source (a source's runs share its stack and its counter, so its rows tend to err together):", "",
              "| source | runs | compared | median abs error | within 10 % | worst | mean signed error |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for url in dict.fromkeys(r["source"]["url"] for r in runs):
        mine = [r for r in runs if r["source"]["url"] == url]
        lines.append(_row(f"[{_short(url)}]({url})", summary([results[r["id"]]["error"] for r in mine if r["id"] in results]),
                          len(mine)))
    lines += ["", "Issue 23's goals on this set:", "", "| goal | here | met |", "|---|---|---|"]
    lines += [f"| {what} | {figure} | {'yes' if met else '**no**'} |" for what, figure, met in goals(rows)]
    return lines + [""]


def render(runs: list[dict], results: dict[str, dict]) -> str:
    expressed = [r for r in runs if r["id"] in results]
    lines = [
        "# Validation: measured runs from the field",
        "",
        "<!-- generated by validation/field_runs.py from validation/field_runs.yaml; edit those, not this page -->",
        "",
        (f"{len(runs)} published training runs whose per-GPU peak was measured, gathered from "
         "torchtitan's benchmark tables, torchtune's README and tutorials, litgpt's config-hub table and resource tables, "
         "peft's DeepSpeed and FSDP guides and README, Qwen's profiling table and the transformers single-GPU guide "
         "(validation/field_runs.yaml holds each "
         "run's setup, number, counter and URL). "
         f"zeroplan can express {len(expressed)} of them, each as the `zeroplan estimate` arguments a new user would write; "
         f"the other {len(runs) - len(expressed)} are listed below with what zeroplan lacks, or what the source leaves "
         "unstated. Regenerate with `python validation/field_runs.py` (`--check` fails when this page is stale)."),
        "",
        "## What is compared",
        "",
        "A counter sees only part of what zeroplan's peak holds, so each run is compared with that part:",
        "",
        "| measurement | what it counts | zeroplan figure compared |",
        "|---|---|---|",
        "| nvidia-smi | the device's used memory (NVML), CUDA context included | the whole peak |",
        "| max_memory_reserved | the caching allocator's reserved peak (`reserved_bytes.all.peak`) | the peak less CUDA context and NCCL buffers |",
        "| peak_memory_active, max_memory_allocated | live tensors' peak | the peak less all overhead (context, NCCL, fragmentation margin) |",
        "| unstated | the source does not say | the whole peak |",
        "",
        "error = (zeroplan - measured) / measured. The arguments zeroplan ran with are in validation/field_runs.yaml.",
        "",
        *render_summary(runs, results),
        "## Runs zeroplan can express",
        "",
        "| run | categories | source row | measured GiB (counter) | zeroplan GiB | error | not modelled |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in expressed:
        res = results[r["id"]]
        lines.append(f"| {r['id']} | {', '.join(r['categories'])} | [{r['row']}]({r['source']['url']}) | "
                     f"{r['measured_gib']:g} ({r['measurement']}) | {res['predicted_gib']:.2f} | {res['error']:+.1%} | "
                     f"{'; '.join(r.get('unmodelled', [])) or '-'} |")
    lines += _misses(expressed, results)
    lines += ["", "## Runs zeroplan cannot express yet", "",
              "`waits on` names the options (being added) that would express the run; the rest lack an option nobody "
              "is adding yet, or a setting the source does not state.", "",
              "| run | categories | source row | measured GiB (counter) | waits on | why not |", "|---|---|---|---:|---|---|"]
    for r in runs:
        if r["id"] not in results:
            lines.append(f"| {r['id']} | {', '.join(r['categories'])} | [{r['row']}]({r['source']['url']}) | "
                         f"{r['measured_gib']:g} ({r['measurement']}) | {waits_on(r)} | "
                         f"{' '.join(str(r['why']).split())} |")
    lines += ["", "## Sources", ""]
    seen = {}
    for r in runs:
        seen.setdefault(r["source"]["url"], " ".join(str(r["source"].get("note", "")).split()))
    lines += [f"- <{url}>: {note}" for url, note in seen.items()]
    version = next((res["zeroplan_version"] for res in results.values()), "?")
    lines += ["", f"Predictions by zeroplan {version}.", ""]
    return "\n".join(lines)


def _misses(expressed: list[dict], results: dict[str, dict]) -> list[str]:
    misses = [r for r in expressed if abs(results[r["id"]]["error"]) > MISS]
    if not misses:
        return []
    lines = ["", f"### Why each miss beyond {MISS:.0%}", ""]
    for r in misses:
        res = results[r["id"]]
        reason = " ".join(str(r.get("miss_reason") or "not analysed yet: " + "; ".join(r.get("unmodelled", []))).split())
        lines.append(f"- **{r['id']}** ({res['error']:+.1%}; zeroplan's activations {res['activations_gib']:.1f} GiB "
                     f"of {res['total_gib']:.1f}): {reason}")
    return lines


def results_for(runs: list[dict]) -> dict[str, dict]:
    options = estimate_options()
    return {r["id"]: compare(r) for r in runs if compared(r, options)}


def main(argv: list[str]) -> int:
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
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
