"""Whether bitsandbytes' 4-bit (NF4/FP4) and LLM.int8 kernels run on a GPU, from its `gpu_arch`.

bitsandbytes@95f9af309d4d5793847169c39288dcd3fcbdf564 (0.50.x), docs/source/installation.mdx: "supported on NVIDIA
GPUs with Compute Capability 6.0+"; its feature table requires 6.0+ for NF4/FP4 and 7.5+ for LLM.int8() (the int8
tensor-core matmul: `cuda_specs.has_imma`; below it diagnostics/cuda.py warns "Only slow 8-bit matmul is supported",
and the CUDA int8 matmul, cuBLASLt's igemmlt, has no fallback of its own: backends/cuda/ops.py falls back to fp32 only
where it reports "not implemented", the HIP path). zeroplan takes the table's requirement. The PyPI wheels for Linux x86-64
with CUDA 13.0-13.2 target sm75 and up (sm70 only up to CUDA 12.8). AMD ROCm: "All features are supported for both
consumer RDNA devices and Data Center CDNA products", wheels built for the gfx targets listed below.
Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.spec import HardwareSpec

SOURCE = "bitsandbytes docs/source/installation.mdx"
MIN_CUDA_CC = (6, 0)  # bitsandbytes on NVIDIA, NF4/FP4 included
INT8_MMA_CC = (7, 5)  # LLM.int8's int8 tensor-core matmul (cuda_specs.has_imma)
CUDA13_WHEEL_MIN_CC = (7, 5)  # Linux x86-64 wheels for CUDA 13.0-13.2: sm75 and up
# the union of the ROCm wheels' targets (installation.mdx, "Installation from PyPI" for ROCm 6.4.4 to 7.14.0)
ROCM_WHEEL_ARCHS = frozenset(
    "gfx908 gfx90a gfx942 gfx950 gfx1250 gfx1030 gfx1031 gfx1032 gfx1033 gfx1034 gfx1035 gfx1036 gfx1100 gfx1101 "
    "gfx1102 gfx1103 gfx1150 gfx1151 gfx1152 gfx1153 gfx1200 gfx1201".split())


def compute_capability(gpu_arch: str) -> tuple[int, int]:
    """sm80 -> (8, 0), sm100 -> (10, 0): bitsandbytes' target names, major digits then one minor."""
    digits = gpu_arch[2:]
    return int(digits[:-1]), int(digits[-1])


def check_bnb_kernels(hw: HardwareSpec | None, quant: str) -> tuple[str, ...]:
    """ZeroplanError where bitsandbytes is known not to run `quant` ("nf4", "fp4", "int8") on `hw`; otherwise
    the assumptions its support rests on (what is unknown said, not refused)."""
    if hw is None or quant not in ("nf4", "fp4", "int8"):  # none, or an FP8 checkpoint (no bitsandbytes)
        return ()
    what = "LLM.int8 (--load-in-8bit)" if quant == "int8" else f"4-bit {quant} (--qlora)"
    if hw.gpu_arch is None:
        return (f"bitsandbytes {what} on {hw.name}: support unknown (the profile states no gpu_arch); "
                f"assumed to run ({SOURCE} lists NVIDIA compute capability 6.0+ and ROCm targets)",)
    if hw.gpu_arch.startswith("gfx"):
        if hw.gpu_arch in ROCM_WHEEL_ARCHS:
            return (f"bitsandbytes {what} on {hw.name} ({hw.gpu_arch}): a ROCm wheel target; all features are "
                    f"supported on CDNA and RDNA ({SOURCE})",)
        return (f"bitsandbytes {what} on {hw.name} ({hw.gpu_arch}): not among the ROCm wheels' targets; support "
                f"unknown (compile from source, {SOURCE})",)
    cc = compute_capability(hw.gpu_arch)
    shown = f"compute capability {cc[0]}.{cc[1]}"
    if cc < MIN_CUDA_CC:
        raise ZeroplanError(f"--hardware {hw.name} ({shown}): bitsandbytes runs on NVIDIA compute capability 6.0+ "
                            f"only, so {what} does not run there ({SOURCE})")
    if quant == "int8" and cc < INT8_MMA_CC:
        raise ZeroplanError(f"--load-in-8bit on --hardware {hw.name} ({shown}): bitsandbytes' LLM.int8 requires "
                            f"compute capability 7.5+ ({SOURCE}); use --qlora (4-bit runs from 6.0)")
    notes = [f"bitsandbytes {what} on {hw.name} ({shown}): supported ({SOURCE}: NF4/FP4 6.0+, LLM.int8 7.5+)"]
    if cc < CUDA13_WHEEL_MIN_CC:
        notes.append(f"bitsandbytes' PyPI wheels for CUDA 13.0-13.2 are built for sm75 and up: on {hw.gpu_arch} "
                     "use a CUDA 12.8 or older build")
    return tuple(notes)
