"""Generate docs/comparison.md: zeroplan beside DeepSpeed's estimator, the EleutherAI cookbook, llm-analysis and
accelerate, per term, for a fixed set of questions.

Usage: python benchmarks/compare_peers.py [--peers-python /tmp/peers-venv/bin/python] [--out docs/comparison.md]

zeroplan's numbers come from its Python API. DeepSpeed's from zeroplan.dscompat (its formulas to the byte), checked
against the real DeepSpeed when --peers-python can import it. llm-analysis is run for real when importable (PyPI
0.2.2) and its git formulas are restated beside it; the cookbook's and accelerate's rules are restated from their
source at a fixed commit (benchmarks/peers.py, whose restatements tests/test_compare.py checks against the peers' own
vectors); accelerate's own estimate_training_usage is called when importable. No peer is a dependency of zeroplan.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import peers  # noqa: E402
from benchmarks.peers import PeerTerms  # noqa: E402
from zeroplan.memory.estimate import Estimate, estimate_memory  # noqa: E402
from zeroplan.memory.setup import Checkpointing  # noqa: E402
from zeroplan.models.architecture import Architecture
from zeroplan.scenario import ScenarioArgs, scenario  # noqa: E402

GIB = 2**30


@dataclass(frozen=True)
class Question:
    key: str
    title: str
    model: str  # preset name or spec path
    gpus: int
    nodes: int
    hardware: str  # zeroplan preset; llm-analysis has a GPU config of the same name
    seq_len: int
    micro_batch: int
    checkpointing: str


QUESTIONS = [
    Question("article-9b", "The article's 9B: Gemma2-9B on 8 x H100 80GB", "gemma2-9b", 8, 1, "h100-sxm-80gb", 2048, 1, "none"),
    Question("llama2-7b-4", "Llama-2-7B on 4 x A100 80GB", "llama-2-7b", 4, 1, "a100-sxm-80gb", 4096, 1, "none"),
    Question("llama2-7b-8", "Llama-2-7B on 8 x A100 80GB", "llama-2-7b", 8, 1, "a100-sxm-80gb", 4096, 1, "none"),
    Question("llama31-70b-64", "Llama-3.1-70B on 64 x H100 80GB (8 nodes)", "llama-3.1-70b", 64, 8, "h100-sxm-80gb", 8192, 1, "full"),
    Question("t5-3b-8", "t5-3b on 8 x A100 80GB", "t5-3b", 8, 1, "a100-sxm-80gb", 512, 8, "none"),
    Question("gpt3-175b-1024", "GPT-3 175B on 1024 x A100 80GB (128 nodes)", "benchmarks/gpt3-175b.yaml", 1024, 128,
             "a100-sxm-80gb", 2048, 1, "full"),
]

LA_PYPI_RECOMPUTE = {"none": 0, "selective": 1, "full": 2}  # llm-analysis 0.2.2's levels (git HEAD: full = 4)
ARTICLE_PARAMS = 9 * 10**9  # the source article, 2.1 (docs/advisor.md): pure bf16 AdamW, 2 + 2 + 4 B/param, 9e9 params


# --- zeroplan ---

def zeroplan_estimate(q: Question) -> tuple[Estimate, Architecture | None, str]:
    """zeroplan's estimate of `q` (activations left out, and said so, while zeroplan.activations is absent)."""
    args = ScenarioArgs(model=str(ROOT / q.model) if q.model.endswith(".yaml") else q.model, gpus=str(q.gpus),
                        nodes=str(q.nodes), hardware=q.hardware, seq_len=str(q.seq_len), micro_batch=str(q.micro_batch),
                        checkpointing=Checkpointing(q.checkpointing))
    scn = scenario(args)
    try:
        return estimate_memory(scn), scn.arch, ""
    except ModuleNotFoundError as exc:
        if exc.name != "zeroplan.memory.activations":
            raise
        note = ("zeroplan.memory.activations is not in this build yet: zeroplan's activations read 0 here and its totals "
                "are model states + buffers + overhead; rerun this script once it lands")
        return estimate_memory(replace(scn, arch=None)), scn.arch, note


def zeroplan_rows(est: Estimate) -> list[PeerTerms]:
    rows = []
    for s in est.stages:
        b = s.gpu_bytes()
        rows.append(PeerTerms("zeroplan", int(s.stage), b["parameters"], b["gradients"], b["optimizer_states"],
                              b["activations"], b["buffers"], b["overhead"], b["total"], "zeroplan Python API"))
    return rows


# --- peers restated ---

def cookbook_rows(q: Question, arch: Architecture) -> list[PeerTerms]:
    """The cookbook run as a careful user would: -nl 3 for gated MLPs, -kv for GQA, -ca for any checkpointing."""
    run = dict(num_layers=arch.num_layers, hidden_size=arch.hidden_size, num_attention_heads=arch.num_attention_heads,
               sequence_length=q.seq_len, batch_size_per_gpu=q.micro_batch, vocab_size=arch.vocab_size,
               ffn_expansion_factor=arch.intermediate_size / arch.hidden_size, num_mlp_linears=3 if arch.gated_mlp else 2,
               kv_size_ratio=arch.num_key_value_heads / arch.num_attention_heads, num_gpus=q.gpus,
               checkpoint_activations=q.checkpointing != "none")
    return [peers.cookbook_memory(peers.CookbookRun(**run, zero_stage=z)) for z in range(4)]


def llm_analysis_run(q: Question, arch: Architecture, zero: int) -> peers.LlmAnalysisRun:
    return peers.LlmAnalysisRun(
        num_layers=arch.num_layers, hidden_size=arch.hidden_size, num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads, ffn_size=arch.intermediate_size, vocab_size=arch.vocab_size,
        gated=arch.gated_mlp, seq_len=q.seq_len, batch_size_per_gpu=q.micro_batch, dp=q.gpus, ds_zero=zero,
        recompute=peers.LA_RECOMPUTE[q.checkpointing])


def article_row(num_gpus: int) -> list[PeerTerms]:
    """The article's own table: pure bf16 AdamW, 2 + 2 + 4 B/param of a 9e9 count, model states only."""
    p, n, rows = ARTICLE_PARAMS, num_gpus, []
    for z in range(4):
        params, grads, optim = 2 * p / (n if z >= 3 else 1), 2 * p / (n if z >= 2 else 1), 4 * p / (n if z >= 1 else 1)
        rows.append(PeerTerms("the article (pure bf16, 9e9)", z, params, grads, optim, None, None, None,
                              params + grads + optim, "the source article, 2.1 (its table, GB = 1e9)"))
    return rows


# --- peers run for real, in --peers-python ---

LLM_ANALYSIS_DRIVER = r"""
import contextlib, io, json, os, sys, tempfile
from importlib.metadata import version
from llm_analysis.analysis import train
jobs = json.load(sys.stdin)
out = {"version": version("llm-analysis"), "results": {}}
with tempfile.TemporaryDirectory() as tmp:
    for key, job in jobs.items():
        path = os.path.join(tmp, key + ".json")
        with open(path, "w") as f:
            json.dump(job["model"], f)
        rows = {}
        for zero in range(4):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    s = train(model_name=path, gpu_name=job["gpu"], total_num_gpus=job["gpus"], ds_zero=zero,
                              seq_len=job["seq_len"], batch_size_per_gpu=job["micro_batch"],
                              activation_recomputation=job["recompute"], flash_attn=True, log_level="ERROR",
                              num_gpus_per_node=job["gpus_per_node"])
                rows[zero] = {k: s[k] for k in ("num_params_total", "weight_memory_per_gpu", "gradient_memory_per_gpu",
                                                "optimizer_state_memory_per_gpu", "activation_memory_per_gpu",
                                                "(weight+op_state+grad+act)_memory_per_gpu")}
            except BaseException as exc:
                msg = str(exc).splitlines()[0].split(", note that")[0][:120] if str(exc) else ""
                rows[zero] = {"error": type(exc).__name__ + (": " + msg if msg else "")}
        out["results"][key] = rows
print("RESULT " + json.dumps(out))
"""

DEEPSPEED_DRIVER = r"""
import contextlib, io, json, sys
import deepspeed
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
jobs = json.load(sys.stdin)
out = {"version": deepspeed.__version__, "results": {}}
for key, j in jobs.items():
    _, gpu2 = estimate_zero2_model_states_mem_needs(j["params"], j["gpn"], j["nodes"], cpu_offload=False)
    _, gpu3, _ = estimate_zero3_model_states_mem_needs(j["params"], j["largest"], j["gpn"], j["nodes"], cpu_offload=False,
                                                      cpu_offload_params=False, zero_init=True)
    out["results"][key] = [gpu2, gpu3]
print("RESULT " + json.dumps(out))
"""

ACCELERATE_DRIVER = r"""
import json, sys
from importlib.metadata import version
from accelerate.commands.estimate import estimate_training_usage
jobs = json.load(sys.stdin)
out = {"version": version("accelerate"),
       "results": {k: max(estimate_training_usage(v, "bfloat16").values()) for k, v in jobs.items()}}
print("RESULT " + json.dumps(out))
"""


def run_driver(python: str, module: str, driver: str, jobs: dict) -> dict | None:
    """The driver's RESULT line as data, or None when `module` is not importable by `python`."""
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    if subprocess.run([python, "-c", probe], capture_output=True).returncode != 0:
        return None
    done = subprocess.run([python, "-c", driver], input=json.dumps(jobs), capture_output=True, text=True, check=True)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def llm_analysis_model(key: str, arch: Architecture, seq_len: int) -> dict:
    """A model config in llm-analysis 0.2.2's keys, from the HF shape (it has no gated-MLP parameter count)."""
    return {"name": key, "num_layers": arch.num_layers, "n_head": arch.num_attention_heads,
            "num_key_value_heads": arch.num_key_value_heads, "hidden_dim": arch.hidden_size, "vocab_size": arch.vocab_size,
            "max_seq_len": seq_len, "ffn_embed_dim": arch.intermediate_size,
            "expansion_ratio": arch.intermediate_size / arch.hidden_size}


def llm_analysis_real(python: str, jobs: dict) -> tuple[dict[str, list[PeerTerms]], str | None]:
    data = run_driver(python, "llm_analysis", LLM_ANALYSIS_DRIVER, jobs)
    if data is None:
        return {}, None
    label = f"llm-analysis {data['version']} (ran)"
    rows: dict[str, list[PeerTerms]] = {}
    for key, by_zero in data["results"].items():
        rows[key] = []
        for zero, r in sorted(by_zero.items()):
            if "error" in r:
                rows[key].append(PeerTerms(label, int(zero), None, None, None, None, None, None, float("nan"),
                                           "failed: " + r["error"]))
                continue
            rows[key].append(PeerTerms(label, int(zero), r["weight_memory_per_gpu"], r["gradient_memory_per_gpu"],
                                       r["optimizer_state_memory_per_gpu"], r["activation_memory_per_gpu"], None, None,
                                       r["(weight+op_state+grad+act)_memory_per_gpu"],
                                       f"ran llm-analysis {data['version']} (PyPI); P = {r['num_params_total']:,.0f}"))
    return rows, data["version"]


def deepspeed_crosscheck(python: str, jobs: dict) -> tuple[str | None, list[str]]:
    """(real DeepSpeed version or None, mismatches against zeroplan.dscompat) for every question."""
    data = run_driver(python, "deepspeed", DEEPSPEED_DRIVER, jobs)
    if data is None:
        return None, []
    mismatches = []
    for key, (gpu2, gpu3) in data["results"].items():
        j = jobs[key]
        ours = [r.total for r in peers.deepspeed_memory(j["params"], j["largest"], j["gpn"], j["nodes"])]
        if ours != [gpu2, gpu3]:
            mismatches.append(f"{key}: DeepSpeed {gpu2:,} / {gpu3:,} B, dscompat {ours[0]:,} / {ours[1]:,} B")
    return data["version"], mismatches


# --- the report ---

DIFFERS = {
    "zeroplan": "the reference: {recipe} ({bytes} B/param), DeepSpeed's buffers at its default knobs, CUDA context + "
                "NCCL + 5 % fragmentation from the hardware profile, activations (see the note)",
    "the article (pure bf16, 9e9)": "pure bf16 AdamW, 2 + 2 + 4 B/param with no fp32 master copy, on a rounded 9e9 "
                                    "count; model states only; GB = 1e9",
    "DeepSpeed estimator": "model states only, 16-bit params and grads + fp32 master and Adam; its fp32 gradient "
                           "partition (4 B/param / N) is always added, zeroplan counts it (at ZeRO-3 one "
                           "sub_group_size at a time) only when the optimizer step is the peak; ZeRO-3 adds 4 L for the gathered layer; no activations, buckets or overhead; "
                           "no ZeRO-0/1",
    "EleutherAI cookbook": "its own P ({p}: untied embeddings, a learned position table, LayerNorm biases); fp32 "
                           "gradients (4 B/param, not 16-bit); activations by Korthikanti et al. without flash "
                           "attention, and 'checkpointing' is the selective coefficient (34 s b h L), not full "
                           "recompute; a 5e8-element bucket (+ 1e9 live params at ZeRO-3) x 2 B; no overhead",
    "llm-analysis (ran)": "its own P ({p}: embeddings assumed tied, MLP 2 h f so SwiGLU's third matrix is missing in "
                          "0.2.2, head dim h/a); fp32 gradients; flash-attention activations with a rough core term; "
                          "peak is the plain sum; no buffers, no overhead",
    "llm-analysis (git d841e40)": "its own P ({p}: gated MLPs counted, embeddings tied, head dim h/a); peak = weights + "
                                  "optimizer + max(activations, gradients) + max(2 prefetched layers, logits): it "
                                  "assumes gradients and activations are never alive together",
    "accelerate estimate-memory": "8 B/param whatever the stage or GPU count: the largest, not the sum, of model, "
                                  "gradients and Adam states; no sharding, no activations, no buffers",
}
NOT_DECODER = "n/a: decoder-only formulas, no encoder-decoder model"


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x != x:  # NaN: the peer failed
        return "failed"
    return f"{x / GIB:,.2f}"


def differs_key(label: str) -> str:
    if label.startswith("llm-analysis") and label.endswith("(ran)"):
        return "llm-analysis (ran)"
    return label


def stage_table(rows: list[PeerTerms], params: dict[str, str], recipe: str, recipe_bytes: int,
                skipped: dict[str, str]) -> list[str]:
    """Totals per stage, one row per estimator, with what it assumes differently."""
    out = ["| estimator | ZeRO-0 | ZeRO-1 | ZeRO-2 | ZeRO-3 | assumptions that differ from zeroplan | numbers from |",
           "|---|---:|---:|---:|---:|---|---|"]
    order = list(dict.fromkeys(r.estimator for r in rows))
    for name in order:
        mine = {r.stage: r for r in rows if r.estimator == name}
        if None in mine:  # no stages: the same answer for each
            cells = [fmt(mine[None].total)] * 4
        else:
            cells = [fmt(mine[z].total) if z in mine else "-" for z in range(4)]
        worked = [r for r in mine.values() if not r.source.startswith("failed")]
        source = worked[0].source if worked else "ran, and failed at every stage (below)"
        text = DIFFERS[differs_key(name)].format(p=params.get(name, "its formula"), recipe=recipe, bytes=recipe_bytes)
        out.append(f"| {name} | {' | '.join(cells)} | {text} | {source} |")
    for name, why in skipped.items():
        out.append(f"| {name} | - | - | - | - | {why} | |")
    failures = [f"{r.estimator} at ZeRO-{r.stage}: {r.source.removeprefix('failed: ')}" for r in rows
                if r.source.startswith("failed")]
    if failures:
        out += ["", "Failed (the peer aborts instead of answering 'does not fit'): " + "; ".join(failures) + "."]
    return out


def term_table(rows: list[PeerTerms], stages: tuple[int, ...] = (2, 3)) -> list[str]:
    out = ["| estimator | stage | parameters | gradients | optimizer states | activations | buffers | overhead | total |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.stage in stages or r.stage is None:
            stage = "any" if r.stage is None else f"ZeRO-{r.stage}"
            cells = [fmt(x) for x in (r.parameters, r.gradients, r.optimizer_states, r.activations, r.buffers, r.overhead, r.total)]
            out.append(f"| {r.estimator} | {stage} | {' | '.join(cells)} |")
    return out


def why_zeroplan(est: Estimate, note: str) -> str:
    """Which lines a real ZeRO-3 run holds that zeroplan counts, and what of it is modelled rather than measured."""
    s = est.stages[-1]
    buffers = ", ".join(f"{t.name} {t.bytes / GIB:.2f}" for t in s.buffers if t.phase.value != "step") or "none"
    step = ", ".join(f"{t.name} {t.bytes / GIB:.2f}" for t in s.buffers if t.phase.value == "step") or "none"
    overhead = ", ".join(f"{t.name} {t.bytes / GIB:.2f}" for t in s.overhead) or "none (no hardware profile)"
    verdict = "fits" if s.fits else "does not fit"
    text = (f"Why zeroplan's figure is what a run sees (ZeRO-{int(s.stage)}, GiB): DeepSpeed allocates the 16-bit "
            f"parameter and gradient shards and the fp32 master and Adam shards ({s.states.total / GIB:.2f}) and, with "
            f"its default knobs, these buffers beside them: {buffers}; in the optimizer step only: {step} (counted when "
            f"the step is the peak; the peak here is the {s.peak_phase.value} phase). Each process also holds memory "
            f"outside PyTorch's tensors: {overhead}. Peak {s.total / GIB:.2f} of {s.usable_bytes / GIB:.2f} usable: "
            f"{verdict}. Modelled, not measured: no run of this configuration was measured; model states are exact "
            "byte accounting, the buffers follow DeepSpeed 0.19.8's allocation code at its defaults "
            "(docs/formulas.md), and the CUDA context, NCCL and fragmentation sizes are the hardware profile's "
            "judgement values (docs/hardware.md).")
    return text + (f" Note: {note}." if note else "")


@dataclass
class Answer:
    q: Question
    est: Estimate
    note: str
    rows: list[PeerTerms]
    params: dict[str, str]
    skipped: dict[str, str]


def decoder_arch(arch: Architecture | None) -> bool:
    return arch is not None and arch.num_encoder_layers == 0


def answer(q: Question, la_real: dict[str, list[PeerTerms]], accelerate: dict | None) -> Answer:
    est, arch, note = zeroplan_estimate(q)
    exact = est.model.num_params
    rows = zeroplan_rows(est) + (article_row(q.gpus) if q.key == "article-9b" else [])
    rows += peers.deepspeed_memory(exact, est.model.largest_layer_params, q.gpus // q.nodes, q.nodes)
    params: dict[str, str] = {}
    skipped: dict[str, str] = {}

    def versus(p: float) -> str:
        return f"{p / 1e9:.3f} B vs {exact / 1e9:.3f} B"

    if decoder_arch(arch):
        cookbook = cookbook_rows(q, arch)
        git = [peers.llm_analysis_memory(llm_analysis_run(q, arch, z)) for z in range(4)]
        rows += cookbook + la_real.get(q.key, []) + git
        params["EleutherAI cookbook"] = versus(peers.cookbook_params(peers.CookbookRun(
            arch.num_layers, arch.hidden_size, arch.num_attention_heads, q.seq_len, vocab_size=arch.vocab_size,
            ffn_expansion_factor=arch.intermediate_size / arch.hidden_size, num_mlp_linears=3 if arch.gated_mlp else 2,
            kv_size_ratio=arch.num_key_value_heads / arch.num_attention_heads)))
        params["llm-analysis (git d841e40)"] = versus(peers.llm_analysis_params(llm_analysis_run(q, arch, 0)))
        ran = [r for r in la_real.get(q.key, []) if "P = " in r.source]
        if ran:
            params[ran[0].estimator] = versus(float(ran[0].source.split("P = ")[1].replace(",", "")))
    else:
        skipped = {"EleutherAI cookbook": NOT_DECODER, "llm-analysis": NOT_DECODER}
    if accelerate is not None:
        total = accelerate["results"][q.key]
        rows.append(PeerTerms("accelerate estimate-memory", None, None, None, None, None, None, None, total,
                              f"ran accelerate {accelerate['version']}'s estimate_training_usage on 4 B x zeroplan's P "
                              "(its create_empty_model needs the Hub)"))
    else:
        rows.append(peers.accelerate_memory(exact))
    return Answer(q, est, note, rows, params, skipped)


def question_section(a: Answer) -> list[str]:
    q, est = a.q, a.est
    recipe = est.recipe
    head = [f"## {a.q.title}", "",
            f"Sequence {q.seq_len}, micro-batch {q.micro_batch} per GPU, checkpointing {q.checkpointing}, flash "
            f"attention, {recipe.name}; {est.model.name}: {est.model.num_params:,} parameters, largest layer "
            f"{est.model.largest_layer_params:,}. Per GPU, GiB (2^30 B); peak for zeroplan.", ""]
    body = stage_table(a.rows, a.params, recipe.name, recipe.total_bytes, a.skipped)
    terms = ["", "Per term at ZeRO-2 and ZeRO-3 (the stages DeepSpeed's estimator covers):", "", *term_table(a.rows)]
    return head + body + terms + ["", why_zeroplan(est, a.note), ""]


def header(ds: tuple[str | None, list[str]], la_version: str | None, acc: dict | None, pending: bool) -> list[str]:
    ds_version, mismatches = ds
    if ds_version is None:
        ds_text = ("DeepSpeed was not installed: its numbers come from zeroplan.dscompat, which reproduces DeepSpeed "
                   "0.19.8's estimator functions to the byte (tests/test_dscompat.py).")
    elif not mismatches:
        ds_text = (f"DeepSpeed {ds_version} was installed and run: `estimate_zero2/3_model_states_mem_needs` return, "
                   "for every question, the same bytes as zeroplan.dscompat, which the tables use.")
    else:
        ds_text = f"DeepSpeed {ds_version} was run and differs from zeroplan.dscompat: " + "; ".join(mismatches) + "."
    la_text = (f"llm-analysis {la_version} (PyPI) was run for real (rows 'llm-analysis {la_version} (ran)'), on a "
               "model config with the Hugging Face shape; its git HEAD d841e40 differs (gated MLPs, peak rule), so "
               "those formulas are restated beside it." if la_version else
               "llm-analysis was not installed: its rows are its git HEAD d841e40 formulas, restated.")
    acc_text = (f"accelerate {acc['version']}'s own `estimate_training_usage` was called" if acc else
                "accelerate's rule is restated from its documentation")
    return [
        "# zeroplan beside the peer estimators",
        "",
        "Generated by `python benchmarks/compare_peers.py --peers-python PATH` (PATH: a python in a scratch venv "
        "with the peers installed; without it, every peer comes from its documented formulas). Do not edit by hand.",
        "",
        *(["**zeroplan's activations are not in this build yet** (zeroplan.activations has not landed): its "
           "activation column reads 0 and its totals are model states + buffers + overhead. Rerun the script once "
           "it lands.", ""] if pending else []),
        "How each peer's numbers were obtained:",
        "",
        f"- {ds_text}",
        f"- {la_text}",
        "- EleutherAI cookbook (`calc/calc_transformer_mem.py`, not on PyPI): from documented formulas, "
        "EleutherAI/cookbook@827ee3b:calc/calc_transformer_mem.py, run as a careful user would (`-nl 3` for gated "
        "MLPs, `-kv` for GQA, `-ca` "
        "for any checkpointing).",
        f"- Hugging Face accelerate `estimate-memory`: {acc_text}; "
        "huggingface/accelerate@16cb6eb:src/accelerate/commands/estimate.py.",
        "- The article's own table (first question): the source article, section 2.1 (docs/advisor.md).",
        "- How the optional peers were installed, in a scratch venv and never as zeroplan dependencies: "
        "docs/benchmarks.md.",
        "",
        "What the tables show: DeepSpeed's estimator is closest on model states (the same bytes, plus an fp32 "
        "gradient partition it always adds); zeroplan adds the buffers DeepSpeed allocates beside them and the "
        "per-process overhead. The cookbook's activations assume eager attention, so they dwarf everything at long "
        "sequences; llm-analysis undercounts the parameters of untied models, of head sizes other than h/a and (0.2.2) "
        "of SwiGLU MLPs, and aborts when a stage does not fit; accelerate's 8 B/param ignores sharding altogether. The per-term tables show where each gap "
        "comes from.",
        "",
        "Every restatement in benchmarks/peers.py reproduces the peer's own published vectors (tests/test_compare.py): "
        "the cookbook README's four examples to the printed 2 decimals, llm-analysis's four runs to the byte, "
        "accelerate's bert-base-cased test and docs table, DeepSpeed's Llama-2-7b print.",
        "",
    ]


def build(peers_python: str) -> str:
    plans = [(q, zeroplan_estimate(q)) for q in QUESTIONS]
    la_jobs = {q.key: {"model": llm_analysis_model(q.key, arch, q.seq_len), "gpu": q.hardware, "gpus": q.gpus,
                       "gpus_per_node": q.gpus // q.nodes, "seq_len": q.seq_len, "micro_batch": q.micro_batch,
                       "recompute": LA_PYPI_RECOMPUTE[q.checkpointing]}
               for q, (_, arch, _) in plans if decoder_arch(arch)}
    la_real, la_version = llm_analysis_real(peers_python, la_jobs)
    accelerate = run_driver(peers_python, "accelerate", ACCELERATE_DRIVER,
                            {q.key: 4 * est.model.num_params for q, (est, _, _) in plans})
    ds_jobs = {q.key: {"params": est.model.num_params, "largest": est.model.largest_layer_params, "gpn": q.gpus // q.nodes,
                       "nodes": q.nodes} for q, (est, _, _) in plans}
    ds = deepspeed_crosscheck(peers_python, ds_jobs)
    lines = header(ds, la_version, accelerate, pending=any(note for _, (_, _, note) in plans))
    for q in QUESTIONS:
        lines += question_section(answer(q, la_real, accelerate))
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers-python", default=sys.executable)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "comparison.md")
    args = parser.parse_args()
    args.out.write_text(build(args.peers_python))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
