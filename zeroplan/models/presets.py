"""Model presets (configs/models/*.yaml) and user model files (YAML specs, Hugging Face config.json),
parsed and validated by the model families."""

from __future__ import annotations

import difflib
from contextvars import ContextVar
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeroplan.errors import SpecError
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.models.aliases import alias_match, reupload_candidates
from zeroplan.models.hub import base_form, family_key, is_hub_id, variant_candidates
from zeroplan.printable import printable
from zeroplan.readers import parse_json, parse_yaml, read_text, require_mapping
from zeroplan.registry import is_file, looks_like_path, preset_paths, unknown_preset
from zeroplan.validate import check_model_counts, validated, validation_message

if TYPE_CHECKING:  # the families load on first use: a bare --params never needs them
    from zeroplan.models.families import FamilyConfig, ModelSpec


def model_from_data(data: Any, origin: str, *, hf_name: str | None = None) -> ModelSpec:
    """A ModelSpec from a zeroplan YAML spec mapping, or from an HF config.json mapping (hf_name given)."""
    from pydantic import ValidationError

    from zeroplan.models.families import ModelSpec, missing_required

    data = require_mapping(data, origin)
    check_model_counts(data, origin)  # before any work sized by them (docs/hardening.md, "Bounds")
    if hf_name is not None and (problem := quantized_checkpoint(data)):
        raise SpecError(f"{origin}: {problem}")
    if hf_name is not None and _only_transformers_describes(data):
        from zeroplan.models.hf import count_with_transformers

        return count_with_transformers(data, hf_name, origin)
    if hf_name is not None:
        if (missing := missing_required(data)) is not None:
            raise SpecError(f"{origin}: {'.'.join(missing)}: missing; a Hugging Face config.json states it (the "
                            "config class's default describes another model)")
        return ModelSpec(name=hf_name, source=origin, config=_family_config(data, origin, strict=False))
    body = dict(data)
    config = _family_config(require_mapping(body.pop("config", None), f"{origin}: config"), origin, strict=True)
    try:
        return ModelSpec.model_validate({**body, "config": config})
    except ValidationError as exc:
        raise SpecError(validation_message(origin, exc, ModelSpec)) from None


# quant_method -> what its checkpoint stores (transformers' quantizers: src/transformers/quantizers/auto.py)
QUANT_FORMATS = {"gptq": "GPTQ: int32-packed 4-bit qweight, qzeros, fp16 scales, g_idx",
                 "awq": "AWQ: int32-packed 4-bit qweight, qzeros, fp16 scales",
                 "fp8": "FP8: float8_e4m3fn weights with fp32 block scales (weight_scale_inv)",
                 "compressed-tensors": "compressed-tensors: packed int or float8 weights with their scales",
                 "bitsandbytes": "bitsandbytes 4- or 8-bit weights (give the unquantized config with --qlora or "
                                 "--load-in-8bit)"}  # fmt: skip


# Set while a run that counts an FP8 checkpoint's stored bytes (a LoRA on it: scenario/finetune.py) loads its model.
FP8_BASE_COUNTED: ContextVar[bool] = ContextVar("FP8_BASE_COUNTED", default=False)


def fp8_block(data: dict) -> tuple[int, int] | None:
    """An FP8 block-scaled checkpoint's weight_block_size (quant_method fp8, two positive integers), else None."""
    config = data.get("quantization_config")
    if not isinstance(config, dict) or config.get("quant_method") != "fp8":
        return None
    block = config.get("weight_block_size")
    ok = isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)
    return (block[0], block[1]) if ok and config.get("scale_fmt", "float") == "float" else None


def checkpoint_fp8_block(ref: str | None) -> tuple[int, int] | None:
    """The weight_block_size of the FP8 checkpoint a --model file or folder names (its config.json), else None."""
    if not ref or ref in preset_paths("models") or is_hub_id(ref) and not _is_dir(ref):
        return None
    path = Path(ref) / "config.json" if _is_dir(ref) else Path(ref)
    if path.suffix != ".json" or not path.is_file():
        return None
    data = parse_json(read_text(path), str(path))
    return fp8_block(data) if isinstance(data, dict) else None


def quantized_checkpoint(data: dict) -> str:
    """One line for a config.json whose checkpoint is stored quantized (its quantization_config) where its stored
    bytes are not counted (only an FP8 block-scaled base under LoRA is); '' otherwise."""
    config, key = data.get("quantization_config"), "quantization_config"
    text = data.get("text_config")
    if config is None and isinstance(text, dict) and text.get("quantization_config") is not None:
        # a vision-language checkpoint may quantize its language model only (moonshotai/Kimi-K2.5: compressed-tensors
        # int4 in text_config): the text tower is what zeroplan counts
        config, key = text["quantization_config"], "text_config.quantization_config"
    if config is None or (FP8_BASE_COUNTED.get() and fp8_block(data) is not None):
        return ""
    method = config.get("quant_method", "?") if isinstance(config, dict) else "?"
    what = QUANT_FORMATS.get(str(method), "a quantized checkpoint")
    return (f"{key}: quant_method {printable(str(method))} ({what}) is a pre-quantized checkpoint, whose "
            "stored bytes zeroplan does not count here; it is not counted as bf16 either: give the unquantized model's "
            "config.json" + ("; an FP8 block-scaled base is counted under LoRA (--lora-rank R)" if method == "fp8" else ""))


def _only_transformers_describes(data: dict) -> bool:
    """An HF config.json whose model_type (a string) zeroplan has no family for: zeroplan.models.hf counts it."""
    from zeroplan.models.families import FAMILIES

    return isinstance(data.get("model_type"), str) and data["model_type"] not in FAMILIES


def _family_config(data: dict, origin: str, *, strict: bool) -> FamilyConfig:
    """The family config in `data`, and the Architecture it implies held to Architecture's bounds (a dropout of
    1.5 is no probability): every error names the file, and the key under `config:` in a YAML spec."""
    from pydantic import ValidationError

    from zeroplan.models.families import FAMILIES, parse_family_config

    try:
        config = parse_family_config(data, strict=strict)
    except ValidationError as exc:
        family = FAMILIES.get(data.get("model_type")) if isinstance(data.get("model_type"), str) else None
        raise SpecError(validation_message(origin, exc, family, prefix="config" if strict else "")) from None
    validated(Architecture, asdict(config.architecture()), origin)
    return config


# NVIDIA ModelOpt writes its quantization beside config.json, not in it (hf_quant_config.json: producer modelopt,
# quantization.quant_algo FP8 / NVFP4 / W4A8_AWQ...; e.g. nvidia/Llama-3.1-70B-Instruct-FP8, vendored at
# ai-dynamo/aiconfigurator@095f58a:aic-core/src/aiconfigurator_core/model_configs/). Its config.json alone reads as bf16.
MODELOPT_FILE = "hf_quant_config.json"


def modelopt_quantized(path: Path) -> str:
    """One line when a config.json's folder holds ModelOpt's hf_quant_config.json (a quantized checkpoint); ''."""
    beside = path.parent / MODELOPT_FILE
    if path.name != "config.json" or not beside.is_file():
        return ""
    data = parse_json(read_text(beside), str(beside))
    quant = data.get("quantization") if isinstance(data, dict) else None
    algo = quant.get("quant_algo") if isinstance(quant, dict) else None
    return (f"{beside}: quant_algo {printable(str(algo))}: a ModelOpt-quantized checkpoint, whose stored bytes zeroplan "
            "does not count; it is not counted as bf16 either: give the unquantized model's config.json")


def load_model_file(path: Path) -> ModelSpec:
    """A model from a zeroplan YAML spec or a Hugging Face config.json."""
    text = read_text(path)
    if path.suffix == ".json" and (line := modelopt_quantized(path)):
        raise SpecError(line)
    if path.suffix == ".json":
        # transformers' from_pretrained reads a folder's config.json: the folder names the model; any other .json
        # file names it by its stem.
        name = path.resolve().parent.name if path.name == "config.json" else path.stem
        return model_from_data(parse_json(text, str(path)), str(path), hf_name=name or path.stem)
    return model_from_data(parse_yaml(text, str(path)), str(path))


def load_model(ref: str) -> ModelSpec:
    """A model by preset name, Hub id, YAML spec path, HF config.json path or a folder holding one."""
    target = model_reference(ref)
    return load_model_file(preset_paths("models")[target] if isinstance(target, str) else target)


_FILE_SUFFIXES = (".yaml", ".yml", ".json")
HOW_TO_GIVE_A_MODEL = "give --model PATH/config.json or a preset: run `zeroplan models`"


def model_reference(ref: str) -> str | Path:
    """What a model reference names: a preset (its name) or a file (a YAML spec or an HF config.json).

    In order: a preset name; a file; a folder holding config.json (as transformers' from_pretrained reads a
    local folder before the Hub); a Hub id that is a preset's `hf_id` (offline: zeroplan never downloads).
    """
    if ref in preset_paths("models"):
        return ref
    if is_file(ref):
        return Path(ref)
    if not ref.endswith(_FILE_SUFFIXES) and _is_dir(ref):  # a folder named x.yaml is a path the reader refuses
        config = Path(ref) / "config.json"
        if not config.is_file():
            raise SpecError(f"{ref}: a folder without a config.json; {HOW_TO_GIVE_A_MODEL}")
        return config
    if is_hub_id(ref):
        if (name := preset_for_hf_id(ref)) is not None or (name := _variant_of(ref)[0]) is not None:
            return name
        raise SpecError(f"{ref}: no preset has this hf_id, and no local folder or file has this name (zeroplan "
                        f"never downloads); {HOW_TO_GIVE_A_MODEL}{_close_hf_ids(ref)}")
    if looks_like_path(ref):
        return Path(ref)  # the loader names what is wrong with it (no such file, ...)
    raise unknown_preset("models", ref)


def _is_dir(ref: str) -> bool:
    try:
        return Path(ref).is_dir()
    except (OSError, ValueError):
        return False


def preset_for_hf_id(hub_id: str) -> str | None:
    """The preset whose `hf_id` is `hub_id` (compared without case, as the Hub does), or None."""
    wanted = hub_id.lower()
    for name, path in preset_paths("models").items():
        found = _yaml_hf_id(path)
        if isinstance(found, str) and found.lower() == wanted:
            return name
    return None


HF_ID_CUTOFF = 0.8  # difflib similarity a Hub id needs to a preset's hf_id to be suggested


def _variant_of(hub_id: str) -> tuple[str | None, str]:
    """(the preset a Hub id is a variant of, the note that says so), or (None, '')."""
    if (aliased := _alias_of(hub_id))[0] is not None:
        return aliased
    bases = {base_form(found)[0]: (name, found) for name, path in preset_paths("models").items()
             if isinstance(found := _yaml_hf_id(path), str)}  # fmt: skip
    owners = {found.partition("/")[0] for _, found in bases.values()}
    for candidate, why in [*variant_candidates(hub_id), *reupload_candidates(hub_id, owners)]:
        if candidate in bases:
            name, preset_id = bases[candidate]
            return name, (f"{printable(hub_id)} is counted as {name} ({preset_id}): {why}; the same layers, widths, "
                          "heads and vocabulary assumed (zeroplan is offline; if its config.json differs, give it with "
                          "--model PATH/config.json)")  # fmt: skip
    return None, ""


def _alias_of(hub_id: str) -> tuple[str | None, str]:
    """(the preset that lists a Hub id, or the checkpoint it is a variant of, under `aliases`; the note), or (None, '')."""
    listed = {}
    for name, path in preset_paths("models").items():
        data = parse_yaml(read_text(path), str(path))
        aliases = data.get("aliases") if isinstance(data, dict) else None
        for alias, why in aliases.items() if isinstance(aliases, dict) else ():
            listed[str(alias)] = (name, str(data.get("hf_id")), str(why))
    if (match := alias_match(hub_id, listed)) is None:
        return None, ""
    alias, removed = match
    name, preset_id, why = (printable(part) for part in listed[alias])
    holds = f"{printable(alias)}'s config.json holds {preset_id}'s layers, widths, heads and vocabulary ({why})"
    if not removed:
        return name, f"{printable(hub_id)} resolved to preset {name} ({preset_id}) because the config is the same: {holds}"
    return name, (f"{printable(hub_id)} is counted as {name} ({preset_id}): a variant ({', '.join(removed)}) of "
                  f"{printable(alias)}, and {holds}; the variant's own shapes assumed the same (zeroplan is offline; if "
                  "its config.json differs, give it with --model PATH/config.json)")


def _close_hf_ids(hub_id: str) -> str:
    """'; did you mean qwen3-8b (Qwen/Qwen3-8B), ...?': the presets of the id's family (its name and generation), else
    those whose hf_id is spelt close; '' for none."""
    ids = {found.lower(): (name, found) for name, path in preset_paths("models").items()
           if isinstance(found := _yaml_hf_id(path), str)}  # fmt: skip
    family = family_key(hub_id)
    close = [key for key in sorted(ids) if family is not None and family_key(key) == family]
    # 0.8: an Instruct or base variant of a preset comes close; another generation (Qwen3 vs Qwen2.5) does not.
    close = close or difflib.get_close_matches(hub_id.lower(), list(ids), n=2, cutoff=HF_ID_CUTOFF)
    return f"; did you mean {', '.join(f'{ids[c][0]} ({ids[c][1]})' for c in close)}?" if close else ""


def _yaml_hf_id(path: Path) -> object:
    data = parse_yaml(read_text(path), str(path))
    return data.get("hf_id") if isinstance(data, dict) else None


def model_facts(ref: str) -> tuple[str, ParamCount, Architecture]:
    """A model's name, exact counts and architecture."""
    from zeroplan.models.params import count_params

    spec = load_model(ref)
    counts = count_params(spec.config)
    if is_hub_id(ref) and preset_for_hf_id(ref) is None and (note := _variant_of(ref)[1]):
        counts = replace(counts, notes=(*counts.notes, note))
    return spec.name, counts, spec.architecture()


def all_models() -> list[ModelSpec]:
    return [load_model_file(p) for p in preset_paths("models").values()]
