"""docs/validation.md from the measured runs and zeroplan's results for them (validation/field_runs.py runs zeroplan):
the figures by category and by source with issue 23's goals beside them, then the per-run tables.

Per group of runs: count, median |error|, the share within 10 %, the worst error (the largest |error|, with its sign)
and the mean signed error, where error = (zeroplan - measured) / measured.
"""

from __future__ import annotations

import statistics

from field_runs import CATEGORIES, waits_on

MISS = 0.25  # an error beyond this is a miss, and docs/validation.md gives its reason
WITHIN = 0.10  # the band the share-within goal counts
# Issue 23's goals, on this set: (what, the figure's key, the bound, True when the figure must stay at or below it)
GOALS = (("median abs error", "median", 0.08, True), ("share within 10 %", "within", 0.75, False))
CATEGORY_MEAN_FLOOR = -0.05  # no category's mean signed error below this (never systematically under)
QLORA_MEDIAN_CAP = 0.10


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
         "peft's DeepSpeed and FSDP guides and README, Qwen's profiling table, the transformers single-GPU guide, ms-swift's "
         "benchmark and examples, BigScience's tr11 Megatron-DeepSpeed benchmark chronicle and the Hugging Face Ulysses blog "
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
        "| nvidia-smi | the device's used memory (NVML), CUDA context included | the whole peak + what zeroplan reports reserved beyond it (FSDP2's stream pools, [engines.md](engines.md#fsdp2s-streams-reserved-not-allocated)) |",
        "| max_memory_reserved | the caching allocator's reserved peak (`reserved_bytes.all.peak`) | the peak + reserved beyond it, less CUDA context and NCCL buffers |",
        "| peak_memory_active, max_memory_allocated | live tensors' peak | the peak less all overhead (context, NCCL, fragmentation margin) |",
        "| unstated | the source does not say | the whole peak |",
        "",
        *_load_lines(runs, results),
        "error = (zeroplan - measured) / measured. The arguments zeroplan ran with are in validation/field_runs.yaml, "
        "each run's `mapping` citing the stack's file at the commit that says why (its QLoRA path, bitsandbytes release, "
        "adapter dtype, the model as the stack builds it).",
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


def _load_lines(runs: list[dict], results: dict[str, dict]) -> list[str]:
    """The counters that also saw the model's build and load (`counter_covers: load`) and what that changed."""
    covers = [r["id"] for r in runs if r.get("counter_covers") == "load" and r["id"] in results]
    covered = [k for k in covers if results[k]["load_gib"] is not None]
    if not covered:
        return []
    ratios = [results[k]["load_gib"] / results[k]["step_gib"] for k in covered]
    above = sum(x > 1 for x in ratios)
    return [f"{len(covered)} one-GPU runs (`counter_covers: load` in the YAML: litgpt's, which prints "
            "`torch.cuda.max_memory_allocated()` once after training and never resets it, litgpt@00af8b0 and "
            "lit-gpt@8641822) are compared with the larger of the step's figure and the load's: every parameter as it "
            "stays for training, plus under `--qlora` the largest linear's bf16 weight and its fp16 copy while "
            "Lightning's `_Linear4bit` quantizes it (Lightning 2.4.0 src/lightning/fabric/plugins/precision/bitsandbytes.py: "
            "each linear is quantized as it is built on the GPU and again as its checkpoint weight arrives; a 16-bit "
            "checkpoint is copied in place from the CPU). The load is at most "
            f"{max(ratios):.2f} of the step on these runs, so {above} of them compare with the load. The counter of "
            f"{len(covers) - len(covered)} more (litgpt's FSDP runs) covers the load too, but Fabric's FSDP load "
            "(`load_raw` under FULL_STATE_DICT, each FSDP unit unsharded in turn) is not modelled here: they compare "
            "with the step.", ""]


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

