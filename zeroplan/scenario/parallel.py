"""The mesh options as typed: --tp --pp --cp --ep --vpp, --pp-schedule and --sequence-parallel, shared by zeroplan's own mesh model
(scenario/mesh.py) and --method megatron (scenario/megatron.py); light, so every estimate can read them."""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.models.mesh import CpComm, Mesh, Schedule
from zeroplan.units import parse_count

MESH_OPTIONS = ("tp", "pp", "cp", "ep", "vpp")
SPLIT_OPTIONS = ("pp_first_layers", "pp_last_layers")


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshArgs:
    """--tp --pp --cp --ep --vpp as typed (numbers still text), and --sequence-parallel."""

    tp: str | None = None
    pp: str | None = None
    cp: str | None = None
    ep: str | None = None
    vpp: str | None = None
    sequence_parallel: bool = False
    schedule: Schedule | None = None
    cp_comm: CpComm = CpComm.p2p  # --cp-comm
    pp_first_layers: str | None = None  # Megatron-LM's --decoder-first-pipeline-num-layers
    pp_last_layers: str | None = None  # --decoder-last-pipeline-num-layers

    @property
    def given(self) -> list[str]:
        """The options that ask for more than data parallelism, as typed."""
        found = [f"--{name}" for name in MESH_OPTIONS if getattr(self, name) not in (None, "1")]
        if self.schedule not in (None, Schedule.one_f_one_b):
            found.append(f"--pp-schedule {self.schedule.value}")
        found += [f"--{n.replace('_', '-')}" for n in SPLIT_OPTIONS if getattr(self, n) is not None]
        found += [f"--cp-comm {self.cp_comm.value}"] * (self.cp_comm is not CpComm.p2p)
        return found + ["--sequence-parallel"] * self.sequence_parallel

    def mesh(self, gpus: int) -> Mesh:
        """The Mesh these options give over `gpus` (numbers parsed, each error naming its option)."""
        degrees = {name: parse_count(getattr(self, name), f"--{name}")
                   for name in MESH_OPTIONS if getattr(self, name) is not None}
        degrees |= {name: parse_count(getattr(self, name), f"--{name.replace('_', '-')}")
                    for name in SPLIT_OPTIONS if getattr(self, name) is not None}
        # no schedule: virtual stages mean interleaving, as Megatron reads --virtual-pipeline-model-parallel-size
        return Mesh(gpus=gpus, sequence_parallel=self.sequence_parallel, schedule=self.schedule, cp_comm=self.cp_comm,
                    **degrees)
