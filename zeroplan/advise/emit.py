"""The DeepSpeed config for the advisor's recommendation: refused when it runs no DeepSpeed or nothing fits."""

from __future__ import annotations

from zeroplan.advise.advice import Advice
from zeroplan.deepspeed.emit import DEFAULT_NVME_PATH, ds_config
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.memory.setup import Engine


def deepspeed_config(advice: Advice, nvme_path: str = DEFAULT_NVME_PATH) -> dict:
    """The ds_config mapping for a fitting recommendation; ZeroplanError when nothing fits."""
    rec = advice.recommendation
    if rec.engine is not Engine.deepspeed:
        raise UsageError(f"--emit-deepspeed writes a DeepSpeed config; --engine {rec.engine.value} runs no DeepSpeed: "
                         "use --emit-accelerate PATH for its Accelerate config")
    if not rec.fits:
        raise ZeroplanError(f"nothing to emit: {rec.summary}" + (f"; {rec.change.description}" if rec.change else ""))
    return ds_config(rec.stage, rec.knobs, advice.scenario.setup.precision, micro_batch=rec.micro_batch,
                     grad_accum=rec.grad_accum, dp=rec.gpus, nvme_path=nvme_path)
