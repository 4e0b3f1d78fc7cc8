"""`--method megatron`: the options of one planned run as Megatron-LM's memory formula reads them.

The formula sees a model's shape, the mesh, the batch, the distributed optimizer (`--stage 1`) and the recompute
granularity, and nothing else; an option it would not read is an error naming it, never dropped.
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.megatron.mapping import megatron_args
from zeroplan.megatron.theory import MegatronEstimate, theoretical_memory
from zeroplan.memory.setup import Checkpointing
from zeroplan.models.presets import model_facts
from zeroplan.scenario import ScenarioArgs, setup_from
from zeroplan.models.mesh import Schedule
from zeroplan.scenario.parallel import MESH_OPTIONS, MeshArgs
from zeroplan.units import parse_count

# The options --method megatron reads (besides the output's --units and --format and the --tp ... mesh).
READS = frozenset({"model", "gpus", "stage", "seq_len", "micro_batch", "grad_accum", "checkpointing", "method"})
_RECOMPUTE = {Checkpointing.none: None, Checkpointing.selective: "selective", Checkpointing.full: "full"}


def megatron_estimate(args: ScenarioArgs, mesh_args: MeshArgs, stage: int | None,
                      ignored: frozenset[str] = frozenset({"units", "fmt"})) -> tuple[MegatronEstimate, ...]:
    """Megatron's figures without and with its distributed optimizer (`--stage 0` / `--stage 1`), or the one asked."""
    unread = sorted(args.given - READS - ignored - set(MESH_OPTIONS) - {"sequence_parallel", "pp_schedule"})
    if unread:
        names = ", ".join("--" + name.replace("_", "-") for name in unread)
        raise ZeroplanError(f"--method megatron reproduces Megatron-LM's formula, which does not read {names}")
    if not args.model:
        raise ZeroplanError("--method megatron needs a model's shape: give --model NAME|PATH")
    if stage not in (None, 0, 1):
        raise ZeroplanError(f"--stage {stage}: Megatron's formula knows no ZeRO-{stage}; --stage 1 is its "
                            "distributed optimizer, --stage 0 plain data parallelism")
    setup = setup_from(args)
    if setup.checkpointing not in _RECOMPUTE or setup.checkpoint_every > 1:
        raise ZeroplanError(f"--method megatron: Megatron's formula knows --checkpointing none, selective or full, not "
                            f"{setup.checkpointing_label}")
    mesh = mesh_args.mesh(parse_count(args.gpus, "--gpus"))
    interleaved = bool(mesh.vpp and mesh.vpp > 1)
    if mesh.schedule not in (Schedule.one_f_one_b, Schedule.interleaved) or (mesh.schedule is Schedule.interleaved) != interleaved:
        raise ZeroplanError(f"--pp-schedule {mesh.schedule.value}{f' with --vpp {mesh.vpp}' if mesh.vpp else ''}: "
                            "Megatron's formula knows 1f1b, and interleaved-1f1b with --vpp 2 or more")
    _, _, arch = model_facts(args.model)
    stages = (0, 1) if stage is None else (stage,)
    return tuple(
        theoretical_memory(megatron_args(arch, mesh, seq_len=setup.seq_len, micro_batch=setup.micro_batch,
                                         distributed_optimizer=bool(s), recompute=_RECOMPUTE[setup.checkpointing]),
                           setup.grad_accum)
        for s in stages
    )
