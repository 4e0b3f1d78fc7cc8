"""Memory lines in training logs: DeepSpeed's see_memory_usage, torchtitan's step line, nvidia-smi's CSV.

- DeepSpeed (deepspeed==0.19.8:deepspeed/runtime/utils.py, `see_memory_usage`) prints a message line, then
  "MA {x} GB  Max_MA {x} GB  CA {x} GB  Max_CA {x} GB" where x is bytes / 1024**3 (GiB, labelled GB) rounded to
  2 decimals, Max_CA to a whole number; it then resets the peak counters, so each Max_MA is the peak since the
  line before, and the largest of them is the run's.
- torchtitan (pytorch/torchtitan@c594d8a: torchtitan/components/metrics.py, `MetricsProcessor.log`) logs
  "memory: {x:5.2f}GiB({pct:.2f}%)" per logged step: x is memory_stats' reserved_bytes.all.peak / 2**30 since the
  last logged step (it resets the peaks after each).
- nvidia-smi --query-gpu=memory.used --format=csv prints the header "memory.used [MiB]" and a row per GPU (and per
  sample with -l): "1234 MiB"; ",noheader,nounits" leaves bare numbers. memory.used is the driver's figure for the
  whole GPU: every process, the CUDA context and NCCL included (https://docs.nvidia.com/deploy/nvidia-smi/,
  "Memory Usage": "Used: Amount of memory used on the device by all active contexts").
"""

from __future__ import annotations

import csv
import io
import re

from zeroplan.calibration.reading import MAX_RECORD_BYTES, Reading
from zeroplan.errors import SpecError
from zeroplan.units import GIB

MIB = 2**20
GIB_2DP = GIB // 200  # half of 0.01 GiB: the rounding of a number printed to 2 decimals of GiB

_NUMBER = r"(\d+(?:\.\d+)?)"
DEEPSPEED_LINE = re.compile(rf"\bMA {_NUMBER} GB\s+Max_MA {_NUMBER} GB\s+CA {_NUMBER} GB\s+Max_CA {_NUMBER} GB")
TORCHTITAN_LINE = re.compile(rf"\bmemory:\s*{_NUMBER}\s*GiB\s*\(\s*{_NUMBER}%\)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # torchtitan colours its line unless disable_color_printing
SMI_HEADER = "memory.used [MiB]"


def _gib(text: str, origin: str) -> int:
    value = float(text)  # the pattern holds digits and one point: no nan; inf past 308 digits
    if not value * GIB < MAX_RECORD_BYTES:
        raise SpecError(f"{origin}: {text[:20]}{'...' if len(text) > 20 else ''} GiB: a byte count past any GPU")
    return round(value * GIB)


def deepspeed_reading(text: str, origin: str) -> Reading | None:
    """The largest Max_MA and CA over every see_memory_usage line; None when there is none."""
    found = [m for m in DEEPSPEED_LINE.finditer(text)]
    if not found:
        return None
    allocated = max(_gib(m.group(2), origin) for m in found)
    reserved = max(max(_gib(m.group(3), origin) for m in found), max(_gib(m.group(4), origin) for m in found) - GIB // 2)
    note = (f"{len(found)} see_memory_usage lines; reserved is the largest CA (Max_CA is printed rounded to whole "
            "GiB, so it bounds the peak only to 0.5 GiB)")
    return Reading("deepspeed", origin, allocated_peak=allocated, reserved_peak=reserved, resolution=GIB_2DP,
                   notes=(note,))


def torchtitan_reading(text: str, origin: str) -> Reading | None:
    found = [TORCHTITAN_LINE.search(ANSI.sub("", line)) for line in text.splitlines() if "memory:" in line]
    found = [m for m in found if m]
    if not found:
        return None
    return Reading("torchtitan", origin, reserved_peak=max(_gib(m.group(1), origin) for m in found), resolution=GIB_2DP,
                   notes=(f"{len(found)} torchtitan step lines: reserved peaks only (its log has no allocated peak)",))


def is_nvidia_smi(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    return SMI_HEADER in first or bool(re.fullmatch(r"\s*\d+(\s*MiB)?\s*", first))


def nvidia_smi_reading(text: str, origin: str) -> Reading:
    """The largest memory.used of the CSV (every row is one GPU at one sample)."""
    rows = [(number, row) for number, row in enumerate(csv.reader(io.StringIO(text)), start=1)
            if any(cell.strip() for cell in row)]
    column = 0
    if any(SMI_HEADER in cell for cell in rows[0][1]):
        column = next(i for i, cell in enumerate(rows[0][1]) if SMI_HEADER in cell)
        rows = rows[1:]
    if not rows:
        raise SpecError(f"{origin}: no rows after the header; expected '<n> MiB' per GPU")
    used = [_mib(row, column, f"{origin}: line {number}") for number, row in rows]
    notes = (f"{len(used)} nvidia-smi rows: the largest taken; memory.used counts every process on the GPU",)
    return Reading("nvidia-smi", origin, device_used=max(used) * MIB, resolution=MIB // 2, notes=notes)


def _mib(row: list[str], column: int, where: str) -> int:
    cell = row[column].strip() if column < len(row) else ""
    match = re.fullmatch(r"(\d{1,9})(\s*MiB)?", cell)
    if not match:
        raise SpecError(f"{where}: expected memory.used as '<n> MiB' or '<n>', got {cell[:40]!r}")
    return int(match.group(1))
