"""Two rules on --from files that need the run's other inputs: a ds_config.json among them is --deepspeed-config, and a
litgpt file's model must not tie its head (litgpt never does). Pure: no I/O beyond reading the files named."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from zeroplan.errors import SpecError, UsageError
from zeroplan.scenario.args import ScenarioArgs

if TYPE_CHECKING:
    from zeroplan.frameworks.apply import FromFile
    from zeroplan.models.architecture import Architecture


def litgpt_head(found: FromFile | None, arch: Architecture | None) -> None:
    """litgpt builds every model with an output head of its own (Lightning-AI/litgpt@26857050:litgpt/model.py
    GPT.__init__: lm_head beside transformer.wte, never tied; convert_hf_checkpoint.py copies a tied embedding into
    it): a model that ties them is another count there, refused rather than counted tied."""
    if found is None or arch is None or found.run.kind.value != "litgpt" or not arch.tie_word_embeddings:
        return
    raise SpecError(f"{found.run.origin}: the model ties its output head to the embedding, which litgpt does not (an "
                    "lm_head of its own): give --model a config.json with tie_word_embeddings: false")


def deepspeed_from(args: ScenarioArgs, paths: tuple[str, ...]) -> tuple[ScenarioArgs, tuple[str, ...]]:
    """A ds_config.json among the --from files becomes --deepspeed-config (one DeepSpeed config per run)."""
    from zeroplan.frameworks.source import deepspeed_configs

    found, rest = deepspeed_configs(paths)
    if not found:
        return args, paths
    if len(found) > 1 or args.deepspeed_config:
        given = [*found, *([args.deepspeed_config] if args.deepspeed_config else [])]
        raise UsageError(f"{', '.join(given)}: one DeepSpeed config per run: give one --from ds_config.json or "
                         "--deepspeed-config")
    updated = replace(args, deepspeed_config=found[0], from_file=tuple(rest) or None,
                      given=args.given | {"deepspeed_config"})
    return updated, tuple(rest)
