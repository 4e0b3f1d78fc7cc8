"""A Scenario laid out on a tensor x pipeline x context x data (x expert) mesh, or refused in one line where zeroplan
does not model it (docs/parallelism.md). Imports nothing of zeroplan.scenario, so the scenario builder, the mesh
options and the plan reader can all call it."""

from __future__ import annotations

from dataclasses import replace

from zeroplan.errors import ZeroplanError
from zeroplan.memory.estimate import Scenario
from zeroplan.memory.mesh import MeshModel, stage_shares, tensor_parallel_layout
from zeroplan.memory.setup import Engine
from zeroplan.models.mesh import CpComm, Mesh, check_mesh
from zeroplan.models.partition import with_partition
from zeroplan.models.presets import load_model


def with_mesh(scn: Scenario, mesh: Mesh, model: str | None) -> Scenario:
    """`scn` laid out on `mesh`: refused, in one line, where zeroplan does not model it or the model does not divide."""
    _check_engine(scn.engine, mesh)
    if getattr(scn, "tuning", None) is not None:
        raise ZeroplanError("fine-tuning (LoRA/QLoRA) on a tp/pp/cp/ep mesh is not modelled yet")
    if scn.arch is None or model is None:
        raise ZeroplanError("a tp/pp/cp/ep mesh needs the model's modules: give --model NAME|PATH, not --params")
    decoder = load_model(model).config.decoder()
    if decoder is None:
        raise ZeroplanError(f"{scn.arch.family}: no block description, so which tensors a mesh splits is unknown; "
                            "zeroplan lays out decoder-only families on a mesh")
    mesh = with_partition(mesh, decoder)  # DeepSpeed's PipelineModule split, from the layers' parameters
    check_mesh(mesh, scn.arch)
    layout = None
    if scn.engine is Engine.fsdp2:
        from zeroplan.models.params import module_inventory

        spec = load_model(model)
        layout = tensor_parallel_layout(module_inventory(spec.config), scn.arch.num_layers, mesh, decoder)
    return replace(scn, mesh=MeshModel(mesh, stage_shares(decoder, mesh), layout), layout=layout or scn.layout)


def _check_engine(engine: Engine, mesh: Mesh) -> None:
    """DeepSpeed's ZeRO on any mesh; FSDP2 on torchtitan's 2-D (dp, tp) mesh, as validation/measure_tp.py measured
    it; the rest refused in one line."""
    if engine is Engine.deepspeed:
        return
    if engine is Engine.fsdp2:
        others = [f"--{n} {v}" for n, v in (("pp", mesh.pp), ("cp", mesh.cp), ("ep", mesh.ep)) if v > 1]
        if others:
            raise ZeroplanError(f"--engine fsdp2 with {', '.join(others)}: zeroplan models FSDP2 on the 2-D (dp, tp) "
                                "mesh only (measured: validation/tp_measured.json); --engine deepspeed models the rest")
        return
    raise ZeroplanError(f"--engine {engine.value} with a tp/pp/cp/ep mesh: zeroplan models the mesh with DeepSpeed's "
                        "ZeRO, and FSDP2 on a (dp, tp) mesh (--engine deepspeed or fsdp2)")


def file_mesh(found, mesh: Mesh | None, gpus: int) -> Mesh | None:
    """An Accelerate file's parallelism_config tp_size as a tensor-parallel mesh (Hugging Face's tp_plan: the
    embedding whole, the logits gathered), or its sp_size as DeepSpeed-Ulysses (cp by all-to-all), unless its
    DeepSpeed config gives a mesh too; `mesh` otherwise."""
    tp, cp = (found.run.get("tp"), found.run.get("cp")) if found is not None else (None, None)
    taken = tp or cp
    if taken is None:
        return mesh
    if mesh is not None:
        raise ZeroplanError(f"{found.run.origin}: {taken.key} and its DeepSpeed config both give a mesh")
    if cp is not None:
        if gpus % int(cp.value):
            raise ZeroplanError(f"{found.run.origin}: {cp.key} {cp.value} does not divide the {gpus} GPUs")
        return Mesh(gpus=gpus, cp=int(cp.value), cp_comm=CpComm.a2a)
    return Mesh(gpus=gpus, tp=int(tp.value), vocab_parallel_embedding=False, vocab_parallel_logits=False)



def partition_of(mesh: Mesh, model: str | None) -> Mesh:
    """`mesh` with DeepSpeed's PipelineModule split of `model`'s layers (unchanged without one, or without the
    modules to weigh: with_mesh then refuses it)."""
    if mesh.pipe_partition is None or model is None:
        return mesh
    decoder = load_model(model).config.decoder()
    return with_partition(mesh, decoder) if decoder is not None else mesh
