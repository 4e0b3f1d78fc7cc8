"""The mesh options as typed: --tp --pp --cp --ep --vpp and --sequence-parallel, shared by zeroplan's own mesh model
(scenario/mesh.py) and --method megatron (scenario/megatron.py); light, so every estimate can read them."""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.models.mesh import Mesh
from zeroplan.units import parse_count

MESH_OPTIONS = ("tp", "pp", "cp", "ep", "vpp")


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshArgs:
    """--tp --pp --cp --ep --vpp as typed (numbers still text), and --sequence-parallel."""

    tp: str | None = None
    pp: str | None = None
    cp: str | None = None
    ep: str | None = None
    vpp: str | None = None
    sequence_parallel: bool = False

    @property
    def given(self) -> list[str]:
        """The options that ask for more than data parallelism, as typed."""
        found = [f"--{name}" for name in MESH_OPTIONS if getattr(self, name) not in (None, "1")]
        return found + ["--sequence-parallel"] * self.sequence_parallel

    def mesh(self, gpus: int) -> Mesh:
        """The Mesh these options give over `gpus` (numbers parsed, each error naming its option)."""
        degrees = {name: parse_count(getattr(self, name), f"--{name}")
                   for name in MESH_OPTIONS if getattr(self, name) is not None}
        return Mesh(gpus=gpus, sequence_parallel=self.sequence_parallel, **degrees)
