"""The fine-tuning rules of a LLaMA-Factory or axolotl file that need the model to resolve: which linears `all`
names, and which parameters a freeze rule leaves trainable.

The readers (llamafactory.py, axolotl.py) state the rules; zeroplan.scenario.finetune resolves them against the
model's named parameters (zeroplan.models.named) into the globs and names `--freeze` and `--lora-targets` take.
Sources, each tool's own code:
  LLaMA-Factory (hiyouga/LLaMA-Factory@ff6d4d1): src/llamafactory/model/adapter.py `_setup_freeze_tuning` (the last
    or first n layers, by the substrings ".{i}.{module}" and the extra modules' names), model_utils/misc.py
    `find_all_linear_modules` (`lora_target: all`: the last name of every *Linear* module whose name has no
    "lm_head").
  axolotl (axolotl-ai-cloud/axolotl@067b021): src/axolotl/utils/freeze.py `freeze_layers_except` /
    `LayerNamePattern` (`unfrozen_parameters`: re.match, a "." not before "+" literal, an optional [a:b] range that
    zeroes part of the tensor's gradient, so the whole tensor still trains), loaders/adapter.py
    `find_all_linear_names` (`lora_target_linear`: every *Linear* module's last name but the output embedding's).
Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zeroplan.errors import SpecError

RANGE = re.compile(r"^(.+)\[([0-9]*)(?::([0-9]*))?\]$")  # axolotl LayerNamePattern._parse_pattern
LAYER = re.compile(r"\.\d+\.")  # LLaMA-Factory: a name with a layer index is a hidden layer's


@dataclass(frozen=True)
class TrainOnly:
    """What a file trains when it freezes the rest: LLaMA-Factory's freeze rule or axolotl's regexes."""

    key: str  # the file's key, for messages
    layers: int | None = None  # freeze_trainable_layers: > 0 the last n layers, < 0 the first n
    modules: tuple[str, ...] = ("all",)  # freeze_trainable_modules
    extra: tuple[str, ...] = ()  # freeze_extra_modules
    patterns: tuple[str, ...] = ()  # unfrozen_parameters

    def trainable(self, names: list[str], num_layers: int) -> set[str]:
        """The parameter names that train; SpecError for a module or pattern that matches nothing."""
        if self.patterns:
            return _unfrozen(self.key, self.patterns, names)
        return _freeze_tuning(self, names, num_layers)


def _freeze_tuning(rule: TrainOnly, names: list[str], num_layers: int) -> set[str]:
    """LLaMA-Factory `_setup_freeze_tuning`: substrings ".{i}.{module}" of the trainable layers, and the extras."""
    n = rule.layers or 0
    ids = range(max(0, num_layers - n), num_layers) if n > 0 else range(min(-n, num_layers))
    hidden = {name.split(".0.")[-1].split(".")[0] for name in names if ".0." in name}
    other = {name.split(".")[-2] for name in names if LAYER.search(name) is None and "." in name}
    wanted = []
    for module in rule.modules:
        if module != "all" and module not in hidden:
            raise SpecError(f"freeze_trainable_modules: {module} is not a module of the model's layers "
                            f"(LLaMA-Factory takes {', '.join(sorted(hidden))} or all)")
        wanted += [f".{i}.{'' if module == 'all' else module}" for i in ids]
    for module in rule.extra:
        if module not in other:
            raise SpecError(f"freeze_extra_modules: {module} is not a module outside the layers "
                            f"(LLaMA-Factory takes {', '.join(sorted(other))})")
        wanted.append(module)
    return {name for name in names if any(part in name for part in wanted)}


def _unfrozen(key: str, patterns: tuple[str, ...], names: list[str]) -> set[str]:
    """axolotl `freeze_layers_except`: the names each pattern re.match-es; a pattern matching none is an error."""
    trainable: set[str] = set()
    for pattern in patterns:
        found = RANGE.match(pattern)
        base = found.group(1) if found else pattern
        try:
            regex = re.compile(re.sub(r"\.(?!\+)", "\\.", base))
        except re.error as exc:
            raise SpecError(f"{key}: {pattern} is not a regular expression ({exc})") from None
        hit = {name for name in names if regex.match(name) or (
            name.startswith(LM_PREFIX) and regex.match(VLM_PREFIX + name[len(LM_PREFIX):]))}  # a VLM's naming
        if not hit:
            raise SpecError(f"{key}: {pattern} matches no parameter of the model (transformers 5 names: "
                            f"{names[0]}, {names[min(1, len(names) - 1)]}, ...)")
        trainable |= hit
    return trainable


# transformers 5's vision-language models hold their language model at model.language_model (Qwen3-VL, Gemma 3,
# Mistral 3, Llama 4: modeling_*.py *ForConditionalGeneration), where the causal LM zeroplan names holds it at model:
# a pattern written for the one names the other's modules through that prefix.
VLM_PREFIX, LM_PREFIX = "model.language_model.", "model."


@dataclass(frozen=True)
class LoraRegex:
    """peft's target_modules given as one string: re.fullmatch over every module's full name
    (peft==0.21.2:peft/utils/other.py match_target_against_key); axolotl passes lora_target_modules so."""

    key: str
    pattern: str

    def targets(self, names: list[str]) -> tuple[str, ...]:
        """The linears' full names the pattern matches (as the causal LM, or as a vision-language model's language
        model); SpecError when none does."""
        try:
            regex = re.compile(self.pattern)
        except re.error as exc:
            raise SpecError(f"{self.key}: {self.pattern} is not a regular expression ({exc})") from None
        hit = tuple(name for name in names if regex.fullmatch(name) or (
            name.startswith(LM_PREFIX) and regex.fullmatch(VLM_PREFIX + name[len(LM_PREFIX):])))
        if not hit:
            raise SpecError(f"{self.key}: {self.pattern} matches no linear of the model (peft's re.fullmatch over the "
                            f"module names: {names[0]}, ...)")
        return hit


def frozen_globs(names: list[str], trainable: set[str]) -> tuple[str, ...]:
    """The `--freeze` globs for every name not in `trainable`: a whole frozen layer as model.layers.i.*, other
    tensors by their own name (Hugging Face parameter names hold no glob characters)."""
    by_layer: dict[str, list[str]] = {}
    for name in names:
        parts = name.split(".")
        layer = ".".join(parts[:3]) if len(parts) > 3 and parts[1] == "layers" and parts[2].isdigit() else ""
        by_layer.setdefault(layer, []).append(name)
    globs: list[str] = []
    for layer, members in by_layer.items():
        frozen = [m for m in members if m not in trainable]
        if layer and len(frozen) == len(members):
            globs.append(f"{layer}.*")
        else:
            globs += frozen
    return tuple(globs)


def linear_names(linears: list[str], head: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The tools' `all`: the distinct last names of the model's linears but the output head's, then `extra`."""
    names = dict.fromkeys(name.rsplit(".", 1)[-1] for name in linears if name.rsplit(".", 1)[-1] != head)
    return tuple(dict.fromkeys([*names, *extra]))


def split_arg(text: str | None) -> tuple[str, ...]:
    """LLaMA-Factory's split_arg: comma-separated, stripped (hparams/finetuning_args.py __post_init__)."""
    return tuple(item.strip() for item in (text or "").split(",") if item.strip())
