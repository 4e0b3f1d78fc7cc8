"""The estimate as plain data: what `zeroplan estimate --format json|yaml` prints, and `zeroplan.to_dict` gives.

The same result objects the tables are built from, dumped. Pure: no rich, typer or yaml. Bytes stay integers;
schema documented in docs/json.md.
"""

from __future__ import annotations

from zeroplan.memory.estimate import Estimate
from zeroplan.memory.stage import StageEstimate
from zeroplan.memory.terms import Term
from zeroplan.memory.timeline import CATEGORIES, Timeline
from zeroplan.memory.verdict import Verdict, stage_verdict, verdict_words
from zeroplan.units import Unit
from zeroplan.validate import as_json
from zeroplan.version import SCHEMA_VERSION, __version__


def _term(t: Term) -> dict:
    return {"name": t.name, "bytes": t.bytes, "phase": t.phase.value, "source": t.source}


def stage_view(s: StageEstimate) -> dict:
    return {
        "stage": int(s.stage),
        "offload_optimizer": s.offload_optimizer.value,
        "offload_param": s.offload_param.value,
        "gpu_bytes": s.gpu_bytes(),
        "model_states_bytes": s.states.total,
        "peak_phase": s.peak_phase.value,
        "phases": {"backward": s.backward_bytes, "step": s.step_bytes},
        "peak_moment": s.peak_moment,
        "timeline": timeline_view(s.timeline),
        "buffers": [_term(t) for t in s.buffers],
        "overhead": [_term(t) for t in s.overhead],
        "reserved_beyond_peak": [_term(t) for t in s.reserved_beyond_peak],
        "cpu_bytes_per_node": s.cpu_bytes_per_node,
        "cpu_terms_per_gpu": [_term(t) for t in s.cpu_terms],
        "nvme_bytes_per_node": s.nvme_bytes_per_node,
        "usable_bytes": s.usable_bytes,
        "fits": s.fits,
        "headroom_bytes": s.headroom_bytes,
        "verdict": verdict_view(stage_verdict(s)),
        **engine_keys(s),
        **({"notes": list(s.base.notes)} if s.base.engine == "deepspeed" and s.base.notes else {}),
    }


def verdict_view(v: Verdict | None) -> dict | None:
    """Fit, headroom and the term that breaks the fit (memory/verdict.py; docs/json.md, "verdict")."""
    if v is None:
        return None
    return {"summary": verdict_words(v), "fits": v.fits, "peak_bytes": v.peak_bytes, "usable_bytes": v.usable_bytes,
            "headroom_bytes": v.headroom_bytes, "moment": v.moment, "breaking_term": v.breaking,
            "breaking_bytes": v.breaking_bytes if v.breaking else None, "breaking_always_alive": v.persistent}


def timeline_view(tl: Timeline) -> dict:
    """The step event by event (docs/json.md, "timeline"): bytes per category at each event's high-water mark."""
    return {
        "categories": list(CATEGORIES),
        "peak_index": tl.peak_index,
        "peak_moment": tl.peak.name,
        "peak_bytes": tl.peak.total,
        "events": [{"name": e.name, "phase": e.phase, "layer": e.layer, "total": e.total, "bytes": e.by_category()}
                   for e in tl.events],
    }


def engine_keys(s: StageEstimate) -> dict:
    """`engine`, `engine_settings` and `notes` for the PyTorch engines; absent for DeepSpeed (its JSON is unchanged)."""
    if s.base.engine == "deepspeed":
        return {}
    return {"engine": s.base.engine,
            "engine_settings": [{"name": x.name, "value": x.value, "source": x.source} for x in s.base.settings],
            "notes": list(s.base.notes)}


def model_view(est: Estimate) -> dict:
    """The model's counts, with num_trainable_params beside num_params (all of them for full training)."""
    tuning = est.scenario.tuning
    trainable = tuning.num_trainable if tuning is not None else est.model.num_params
    return {**as_json(est.model), "num_trainable_params": trainable}


def finetune_view(tuning) -> dict | None:
    """The fine-tuning mode and what it stores; None for full training."""
    if tuning is None:
        return None
    return {"mode": tuning.spec.mode, **as_json(tuning.spec), "num_params_with_adapters": tuning.num_params,
            "num_trainable_params": tuning.num_trainable, "frozen_float_params": tuning.frozen_float_numel,
            "quantized_params": tuning.quantized_numel, "packed_weight_bytes": tuning.packed_bytes,
            "quant_state_bytes": tuning.quant_state_bytes, "adapted_linears": len(tuning.adapted),
            "adapted_parameters": len(tuning.adapted_params)}


def estimate_view(est: Estimate, unit: Unit) -> dict:
    """The estimate as JSON-ready data; bytes are integers, `units` only says how tables display them."""
    recipe = est.recipe
    acts = est.activations
    return {
        "schema_version": SCHEMA_VERSION,
        "zeroplan_version": __version__,
        "units": {"bytes": "B", "display": unit.label, "display_bytes": unit.bytes},
        "model": model_view(est),
        "finetune": finetune_view(est.scenario.tuning),
        "teacher": teacher_view(est.scenario.teacher),
        "recipe": {
            "name": recipe.name,
            "precision": recipe.precision.value,
            "optimizer": recipe.optimizer.value,
            "fp32_grad_accum": recipe.fp32_grad_accum,
            "bytes_per_param": {
                "parameters": recipe.param_bytes,
                "gradients": recipe.grad_bytes,
                "optimizer_states": recipe.optimizer_bytes,
                "master_copy": recipe.master_bytes,
                "total": recipe.total_bytes,
            },
        },
        "setup": as_json(est.setup),
        # on a mesh the data-parallel degree is the mesh's (gpus / (tp x pp x cp)): one number wherever it appears
        "parallelism": {**as_json(est.parallelism),
                        "dp": est.scenario.mesh.mesh.dp if est.scenario.mesh is not None else est.parallelism.dp,
                        "gpus_per_node": est.parallelism.gpus_per_node},
        "engine": est.scenario.engine.value,
        "deepspeed_knobs": as_json(est.knobs),
        "hardware": as_json(est.hardware) if est.hardware else None,
        "activations": as_json(acts) if acts is not None else None,
        "stages": [stage_view(s) for s in est.stages],
        "assumptions": list(est.assumptions),
        **mesh_keys(est),
        **calibration_keys(est.scenario.overheads),
    }


def teacher_view(teacher) -> dict | None:
    """Knowledge distillation's teacher (memory.teacher), or None."""
    return None if teacher is None else {"name": teacher.name, "num_params": teacher.params}


def calibration_keys(over) -> dict:
    """`calibration` (the file and what it changed) when `over` (a stage.Overheads or None) came from one
    (docs/calibrate.md); absent otherwise."""
    if over is None or not over.calibration:
        return {}
    return {"calibration": {"file": over.calibration, "changes": list(over.calibration_changes)}}


def mesh_keys(est: Estimate) -> dict:
    """`mesh` (degrees, groups, each pipeline stage's share of one rank) when the run has one; absent otherwise."""
    model = est.scenario.mesh
    if model is None:
        return {}
    from zeroplan.memory.mesh import rank_summaries, shard_groups

    m = model.mesh
    dense, expert = shard_groups(m)
    return {"mesh": {"tp": m.tp, "pp": m.pp, "cp": m.cp, "dp": m.dp, "ep": m.ep, "gpus": m.gpus,
                     "sequence_parallel": m.sequence_parallel and m.tp > 1, "zero_group": dense,
                     "expert_zero_group": expert, "describe": m.describe(),
                     "stages": [as_json(s) for s in model.shares], "vpp": m.vpp, "schedule": m.schedule.value,
                     "cp_comm": m.cp_comm.value, "ranks": _with_peaks(rank_summaries(model, est.scenario.arch, est.scenario.setup), est)}}


def _with_peaks(ranks: list[dict], est: Estimate) -> list[dict]:
    """Each pipeline rank's per-GPU peak under every ZeRO stage estimated (`peak_bytes` by stage; the estimate's
    figures are the largest of them)."""
    from zeroplan.memory.estimate import stage_knobs
    from zeroplan.memory.mesh import mesh_activation_bytes, rank_estimates

    scn = est.scenario
    acts = mesh_activation_bytes(scn.mesh, scn.arch, scn.setup)
    peaks = {int(s.stage): [e.total for e in rank_estimates(
        scn.mesh, acts, est.recipe, s.stage, scn.parallelism, stage_knobs(scn.knobs, s.stage), scn.arch.hidden_size,
        scn.overheads, scn.usable_bytes)] for s in est.stages}
    if scn.mesh.layout is not None:  # FSDP2 on (dp, tp): one pipeline rank
        return [{**ranks[0], "peak_bytes": {str(k): v[0] for k, v in peaks.items()}}]
    return [{**r, "peak_bytes": {str(k): v[i] for k, v in peaks.items()}} for i, r in enumerate(ranks)]
