"""Several `--from` files of one run: a training file and its launcher's config (`--from train.yaml --from
accelerate.yaml`). Which file decides each option.

A key a file states beats a default another file's tool would apply. Where both state one, the training file's
wins, as the Trainer's arguments override the launcher's (transformers' TrainingArguments sets Accelerate's
mixed precision, DeepSpeed and FSDP plugins from its own `bf16`, `deepspeed`, `fsdp`); two training files, or two
launchers, that state different values are an error naming both. The engine, its stage, its DeepSpeed config and
its offload come together from the one file that decides the engine. Bf16 parameters a trainer loads (TRL's and
ms-swift's `torch_dtype: bfloat16`) train as bf16-true under DDP, but under DeepSpeed or FSDP, which hold fp32
masters of them (Accelerate upcasts FSDP's), as bf16-mixed. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.run import FrameworkRun, Taken, shown
from zeroplan.memory.setup import Engine, Precision

LAUNCHERS = (FromKind.accelerate,)
ENGINE_GROUP = frozenset({"engine", "stage", "deepspeed_config", "offload_param", "offload_optimizer"})
LOAD_DTYPE_KEYS = ("torch_dtype", "dtype")


def _rank(run: FrameworkRun, taken: Taken) -> tuple[bool, bool]:
    return (not taken.default, run.kind not in LAUNCHERS)


def choose(runs: tuple[FrameworkRun, ...]) -> dict[str, tuple[FrameworkRun, Taken]]:
    """option -> (the file, the key) that decides it; SpecError for two files of one rank stating different values."""
    if len(runs) == 1:
        return {}
    best: dict[str, tuple[FrameworkRun, Taken]] = {}
    for run in runs:
        for taken in run.taken:
            if taken.option is None:
                continue
            held = best.get(taken.option)
            if held is None or _rank(run, taken) > _rank(*held):
                best[taken.option] = (run, taken)
            elif _rank(run, taken) == _rank(*held) and held[0] is not run and taken.value != held[1].value and not taken.default:
                raise SpecError(f"{held[0].origin}: {held[1].key}: {shown(held[1].written)} and {run.origin}: {taken.key}: "
                                f"{shown(taken.written)} disagree; give one, or the option on the command line")  # fmt: skip
    if "engine" in best:  # the engine's group from the file that decides the engine
        owner = best["engine"][0]
        for option in ENGINE_GROUP - {"engine"}:
            own = owner.get(option)
            if own is not None:
                best[option] = (owner, own)
            elif option in best and best[option][0] is not owner:
                del best[option]
    return _masters(best)


def _masters(best: dict[str, tuple[FrameworkRun, Taken]]) -> dict[str, tuple[FrameworkRun, Taken]]:
    """bf16-loaded parameters under a sharding engine: fp32 masters, bf16-mixed."""
    precision, engine = best.get("precision"), best.get("engine")
    if precision is None or engine is None or engine[1].value not in (Engine.deepspeed, Engine.fsdp, Engine.fsdp2):
        return best
    run, taken = precision
    if taken.key in LOAD_DTYPE_KEYS and taken.value is Precision.bf16_true:
        means = f"--precision bf16-mixed (bf16-loaded parameters; {engine[1].value} keeps fp32 masters of them)"
        best["precision"] = (run, replace(taken, value=Precision.bf16_mixed, means=means))
    return best


def merged(runs: tuple[FrameworkRun, ...], chosen: dict[str, tuple[FrameworkRun, Taken]]) -> FrameworkRun:
    """One run for what reads a FromFile's `run`: the training file's kind, every origin, the deciding keys."""
    if len(runs) == 1:
        return runs[0]
    main = next((r for r in runs if r.kind not in LAUNCHERS), runs[0])
    taken = tuple(t for _, t in chosen.values())
    origin = " + ".join(r.origin for r in runs)
    return FrameworkRun(main.kind, origin, taken, tuple(u for r in runs for u in r.uncounted),
                        asks=tuple(a for r in runs for a in r.asks))
