"""A plan against its DeepSpeed config: the one training setup the run has, and every stated value they disagree on.

The plan's values first, then what its config states or DeepSpeed's batch rule derives, then zeroplan's defaults;
check/planfiles.py calls these with the config read once without the plan's setup ("auto" still open) and once
with it. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.check.plan import GAS, MICRO, TBS, Plan, Training
from zeroplan.deepspeed.batch import BATCH_KEYS
from zeroplan.deepspeed.reader import DeepSpeedConfig
from zeroplan.memory.setup import TrainingSetup


def _deepspeed_batch(config: DeepSpeedConfig, dp: int) -> dict[str, tuple[int, bool]]:
    """key -> (value, derived by DeepSpeed) for each batch value the config states or DeepSpeed derives from it."""
    given = {key: getattr(config, key) for key in BATCH_KEYS if getattr(config, key) is not None}
    triple = config.batch(dp)
    if triple is None:
        return {key: (value, False) for key, value in given.items()}
    derived = dict(zip(BATCH_KEYS, (triple.micro_batch, triple.grad_acc, triple.train_batch)))
    return {key: (value, key not in given) for key, value in derived.items()}


def merge_setup(plan: Plan, config: DeepSpeedConfig) -> tuple[TrainingSetup, list[str]]:
    """The setup the run has, and every stated value that disagrees with it (Hugging Face refuses those too).

    The plan's values first; what it leaves open from the DeepSpeed config (as given, or derived by
    DeepSpeed's batch rule), else the defaults. `config` is read without the plan's setup, so its
    `"auto"` values are still open.
    """
    t, dp, origin = plan.training, plan.data_parallel, config.origin
    theirs = _deepspeed_batch(config, dp)
    micro, gas = plan.batch(theirs.get(MICRO, (None,))[0], theirs.get(GAS, (None,))[0])
    ours = {MICRO: micro, GAS: gas, TBS: micro * gas * dp}
    problems = []
    uneven = t.train_batch_size is not None and t.train_batch_size != ours[TBS]
    if uneven:
        problems.append(f"training.train_batch_size ({t.train_batch_size}) is not a whole multiple of "
                        f"{MICRO} x gpus ({micro} x {dp}, the micro-batch {origin} gives)")  # fmt: skip
    for key, (value, derived) in theirs.items():
        # Only what the plan says can disagree with the config; the config against itself is DeepSpeed's
        # batch assert, the batch-identity rule's finding (which --ignore and every report format see).
        if value != ours[key] and not (key == TBS and uneven) and _plan_states(t, key):
            how = " (derived by DeepSpeed)" if derived else ""
            problems.append(f"training.{key} is {ours[key]}{_how(t, key)} but {origin} gives {value}{how}")
    pinned = config.setup_fields()
    precision = pinned.get("precision")
    if "precision" in t.model_fields_set and precision is not None and precision is not t.precision:
        problems.append(f"training.precision is {t.precision.value} but {origin} makes DeepSpeed run {precision.value}")
    update = {"fp32_grad_accum": pinned["fp32_grad_accum"]}
    if precision is not None and "precision" not in t.model_fields_set:
        update["precision"] = precision
    return replace(plan.setup(micro, gas), **update), problems


def assumed_fields(plan: Plan, config: DeepSpeedConfig) -> frozenset[str]:
    """The setup fields the run takes from zeroplan's defaults: neither the plan nor the config (read without
    the plan's setup) states them. The config's "auto" values that take them say so."""
    t, theirs = plan.training, _deepspeed_batch(config, plan.data_parallel)
    found = {"precision"} if "precision" not in t.model_fields_set and config.precision_left_open else set()
    found |= {field for key, field in ((MICRO, "micro_batch"), (GAS, "grad_accum"))
              if not _plan_states(t, key) and key not in theirs}  # fmt: skip
    return frozenset(found)


def settle_precision(plan: Plan, setup: TrainingSetup, config: DeepSpeedConfig) -> tuple[TrainingSetup, list[str]]:
    """The setup with the precision DeepSpeed runs, read with its "auto" filled (config read with `setup`).

    One precision for the run: a plan that states another is refused, as in merge_setup; otherwise the config's
    is used, so what an "auto" resolved to (or a section Accelerate adds) and the byte recipe agree.
    """
    pinned, t = config.setup_fields(), plan.training
    if "precision" in t.model_fields_set and pinned["precision"] is not t.precision:
        runs = pinned["precision"].value
        return setup, [f"training.precision is {t.precision.value} but {config.origin} makes DeepSpeed run {runs}"]
    return replace(setup, precision=pinned["precision"], fp32_grad_accum=pinned["fp32_grad_accum"]), []


def _plan_states(training: Training, key: str) -> bool:
    """Whether the plan gives `key`: stated, or derived from batch values it states."""
    stated = training.model_fields_set
    return key in stated or {
        TBS: bool({MICRO, GAS} & stated), GAS: TBS in stated, MICRO: {TBS, GAS} <= stated,
    }.get(key, False)


def _how(training: Training, key: str) -> str:
    """'' for a value the plan states, else ' (derived)' or ' (default)'."""
    stated = training.model_fields_set
    if key in stated:
        return ""
    derived = key == TBS or (key == GAS and TBS in stated) or (key == MICRO and {TBS, GAS} <= stated)
    return " (derived)" if derived else " (default)"
