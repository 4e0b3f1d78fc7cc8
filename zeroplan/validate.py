"""What comes from outside, validated by pydantic: the input dataclasses' field types, `validated()`, and the
one format of a validation error that every file reader and the CLI print.

The calculators take plain frozen dataclasses (memory/setup.py, hardware/spec.py, models/architecture.py) and
trust them: building or `dataclasses.replace`-ing one checks nothing but its cross-field rule (`__post_init__`,
a ValueError naming every value), so the advisor and the sweeps copy them freely. What a user wrote reaches
them through `validated()` or through a pydantic model that nests them (a plan, a DeepSpeed config): pydantic
reads the constraints in their annotations, forbids unknown keys (`__pydantic_config__`) and runs the same
`__post_init__`. Results (Recipe, ActivationEstimate, ...) are plain dataclasses with no constraints at all.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from enum import Enum
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from zeroplan.errors import SpecError

T = TypeVar("T")

# The input dataclasses' field types. Strict, so that a typo'd file is an error rather than a guess: "80" is not
# a number, true is not a count, 8.0 is not a whole number (a float field takes an int, but not inf or nan: no
# input means them, and inf GiB overflows a byte count). Enums stay lax: they take their values ("bf16-mixed"),
# as YAML, JSON and the command line write them.
Int = Annotated[int, Field(strict=True)]
Count = Annotated[int, Field(strict=True, gt=0)]  # a positive whole number (PositiveInt)
Size = Annotated[int, Field(strict=True, ge=0)]  # a whole number, 0 allowed
Real = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Flag = Annotated[bool, Field(strict=True)]
Text = Annotated[str, Field(strict=True)]
# A name that is printed in tables and reports (a model's, a hardware profile's): no control characters, so a
# file cannot move the cursor, recolour a terminal or break an XML report through it (docs/hardening.md).
NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"
Name = Annotated[str, Field(strict=True, min_length=1, pattern=NAME_PATTERN)]

# A run's counts past any real run (docs/hardening.md, "Classes"): the options' bounds (scenario/bounds.py) and the
# fields' of the input dataclasses (memory/setup.py), so a value from a file is held as a value typed is.
# The largest training clusters hold about 10^5 GPUs (xAI's Colossus, 200,000 H100/H200 in 2025); 2^20 is five times
# that. Parallel degrees cannot exceed the GPUs.
MAX_GPUS = 2**20
# Llama 4 Scout's 10M-token context (meta-llama/Llama-4-Scout-17B-16E config.json) is the longest trained; 2^27 is
# 13 times it.
MAX_SEQ_LEN = 2**27
MAX_BATCH = 2**20  # sequences per GPU per step, or micro-steps per optimizer step: 10^6, where runs use 1 to 10^3
MAX_GLOBAL_BATCH = 2**24  # sequences per optimizer step over all GPUs; Llama 3 405B ran 2,048 (16M tokens)
MAX_LORA_RANK = 2**16  # a rank above the widest model's hidden size (PaLM's 18,432) adapts nothing more
GPUs = Annotated[int, Field(strict=True, gt=0, le=MAX_GPUS)]
SeqLen = Annotated[int, Field(strict=True, gt=0, le=MAX_SEQ_LEN)]
Batch = Annotated[int, Field(strict=True, gt=0, le=MAX_BATCH)]

INPUT_CONFIG = ConfigDict(extra="forbid")  # an input dataclass's __pydantic_config__: an unknown key is an error


@functools.cache
def adapter(kind: Any) -> TypeAdapter:
    """pydantic's validator and serializer for `kind`, built once."""
    return TypeAdapter(kind)


def validated(kind: type[T], data: Any, origin: str = "") -> T:
    """`data` (a mapping, as read from a file or gathered from options) as a checked `kind`.

    Raises SpecError: 'origin: key: reason; key: reason' (without origin: the reasons alone).
    """
    try:
        return adapter(kind).validate_python(data)
    except ValidationError as exc:
        raise SpecError(validation_message(origin, exc, kind)) from None


def as_json(obj: Any, **options: Any) -> Any:
    """A dataclass as JSON data (enums as their values, tuples as lists, nested dataclasses as objects);
    `options` as pydantic's dump_python takes them (include, exclude, exclude_none)."""
    return adapter(type(obj)).dump_python(obj, mode="json", **options)


def validation_message(origin: str, exc: ValidationError, kind: Any = None, prefix: str = "") -> str:
    """Every problem of `exc` on one line, 'origin: dotted.path: reason' joined by '; '.

    `kind` is the type validated (for the field names an unknown key is matched against), `prefix` the path
    of that type inside the file.
    """
    parts = "; ".join(problems(exc, kind, prefix))
    return f"{origin}: {parts}" if origin else parts


def problems(exc: ValidationError, kind: Any = None, prefix: str = "") -> list[str]:
    """One 'dotted.path: reason' per error of `exc`; a cross-field rule's (no path) is its message alone.

    A key missing beside an unknown one is most likely that key misspelt: only the unknown key is reported,
    with its did-you-mean.
    """
    errors = exc.errors(include_url=False)
    misspelt = {tuple(e["loc"][:-1]) for e in errors if e["type"] in UNKNOWN_KEY}
    lines = []
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "missing" and loc[:-1] in misspelt:
            continue
        path = ".".join(str(p) for p in ((prefix,) if prefix else ()) + loc)
        reason = _reason(err, kind, loc)
        lines.append(f"{path}: {reason}" if path else reason)
    return lines


# A model's unknown key; a dataclass's; a key that is not even a string (YAML's `1: 2`).
UNKNOWN_KEY = ("extra_forbidden", "unexpected_keyword_argument", "invalid_key")
EXPECTED = {  # pydantic error type -> what the value should have been
    "int_type": "a whole number", "int_from_float": "a whole number", "float_type": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false", "string_type": "a string",
}
MAPPINGS = {"dataclass_type", "model_type", "model_attributes_type", "dict_type"}
BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"),
          "less_than_equal": ("le", "<=")}  # fmt: skip


def _reason(err: Any, kind: Any, loc: tuple) -> str:
    """The house wording of one pydantic error (the value shown as repr); pydantic's own message for the rest."""
    code, value, at = err["type"], err.get("input"), _type_at(kind, loc)
    if code in UNKNOWN_KEY:
        return _unknown_key(str(loc[-1]), _field_types(_type_at(kind, loc[:-1])))
    if code == "missing":
        return "missing"
    if code in EXPECTED:
        return f"expected {EXPECTED[code]}, got {value!r}"
    if code in MAPPINGS:
        return f"expected a mapping of keys to values, got {type(value).__name__}"
    if code in BOUNDS:
        key, sign = BOUNDS[code]
        shown = float(value) if at is float and type(value) is int else value  # the value as the field holds it
        bound = err["ctx"][key]
        if isinstance(bound, int) and code == "less_than_equal" and bound >= 1024:  # a count's bound: past any real run
            count = f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
            return f"{count} is past any real run (at most {bound:,})"  # a count may come as text ('1e15')
        return f"must be {sign} {bound:g}, got {shown!r}"
    if code == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == NAME_PATTERN:
        return f"a name may not hold control characters, got {value!r}"
    if code in ("literal_error", "enum") and (options := _options(at)):
        return f"expected {' or '.join(map(repr, options))}, got {value!r}"
    return err["msg"].removeprefix("Value error, ")


def _unknown_key(key: str, names: dict[str, Any]) -> str:
    """'unknown key; did you mean X?' (difflib over the keys of the type it is in), or the keys it has."""
    if not names:
        return "unknown key"
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f"unknown key; did you mean {close[0]}?" if close else f"unknown key; expected one of {', '.join(names)}"


def _type_at(kind: Any, loc: tuple) -> Any:
    """The (unwrapped) type of the value at `loc` inside `kind`; None where the path leaves what is known."""
    for part in loc:
        kind = _bare(kind)
        if isinstance(part, int):  # an item of a list or tuple
            args = typing.get_args(kind)
            kind = args[0] if args else None
        else:
            kind = _field_types(kind).get(part)
    return _bare(kind)


def _bare(kind: Any) -> Any:
    """`kind` without Annotated metadata or a `| None`."""
    while True:
        if typing.get_origin(kind) is Annotated:
            kind = typing.get_args(kind)[0]
            continue
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        if _is_union(kind) and len(options) == 1:
            kind = options[0]
            continue
        return kind


def _options(kind: Any) -> tuple:
    """The values a Literal or an Enum allows; () for any other type."""
    if typing.get_origin(kind) is typing.Literal:
        return typing.get_args(kind)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return tuple(m.value for m in kind)
    return ()


def _is_union(kind: Any) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType)


@functools.cache
def _field_types(kind: Any) -> dict[str, Any]:
    """{key as a file writes it: type} of a pydantic model or a dataclass; {} for anything else."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return {field.alias or name: field.annotation for name, field in kind.model_fields.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind, include_extras=True)
        return {f.name: hints[f.name] for f in dataclasses.fields(kind)}
    return {}



# A model file's counts past any real model, refused where the file is read (models/presets.py), before any work sized
# by them (a config.json with num_hidden_layers: 10^9 grew to 7.8 GB). Keys as Hugging Face configs write them,
# at any depth (text_config). Each bound is far past the largest real value: layers 126 (Llama 3.1 405B; DeepNet,
# arXiv:2203.00555, trained 1,000; `advise` on 10,000 layers took 44 s, past the 30 s every command answers in),
# widths 73,728 (PaLM's MLP), vocabularies 262,144 (Gemma 3), heads 128, routed experts 2,048 (Switch-C).
_LAYERS, _WIDTH, _VOCAB, _HEADS, _EXPERTS = 2048, 2**20, 2**24, 2**16, 2**16
MAX_MODEL_COUNTS = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers",
                     "num_encoder_layers", "first_k_dense_replace"), _LAYERS),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "intermediate_size", "n_inner", "ffn_dim", "d_ff",
                     "moe_intermediate_size", "shared_expert_intermediate_size", "head_dim", "kv_lora_rank",
                     "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "d_kv"), _WIDTH),
    "vocab_size": _VOCAB,
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "num_heads", "multi_query_group_num"),
                    _HEADS),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "n_shared_experts",
                     "num_experts_per_tok", "n_group", "topk_group"), _EXPERTS),
}  # fmt: skip


def check_model_counts(data: Any, origin: str, path: str = "", depth: int = 0) -> None:
    """SpecError naming the key and the bound for the first count in `data` (a model file's mapping) past
    MAX_MODEL_COUNTS; other values are left to the family's own checks."""
    if depth > 16:  # model configs nest 2 deep (text_config.rope_scaling); the family checks reject the rest
        return
    if isinstance(data, dict):
        for key, value in data.items():
            where = f"{path}.{key}" if path else str(key)
            bound = MAX_MODEL_COUNTS.get(key) if isinstance(key, str) else None
            if bound is not None and isinstance(value, int) and not isinstance(value, bool) and value > bound:
                raise SpecError(f"{origin}: {where}: {value:,} is past any real model (at most {bound:,})")
            check_model_counts(value, origin, where, depth + 1)
    elif isinstance(data, list):
        for i, item in enumerate(data[:100_000]):
            check_model_counts(item, origin, f"{path}.{i}", depth + 1)
