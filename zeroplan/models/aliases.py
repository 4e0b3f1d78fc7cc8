"""Hub ids counted as a preset though they are not its `hf_id`: the ids a preset lists under `aliases` (another
checkpoint whose config.json holds its shapes, vendored and counted in validation/hf_reference/presets/), their
variants, and re-uploads of a preset's checkpoint by an account that mirrors others' repositories. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from zeroplan.models.hub import QUANTIZED, base_form, variant_candidates

# Accounts whose repositories re-upload another publisher's checkpoint under its own name, config.json included
# (NousResearch/Llama-2-7b-hf is meta-llama/Llama-2-7b-hf's files; unsloth/Qwen2.5-7B is Qwen/Qwen2.5-7B's). Their
# quantized uploads (-bnb-4bit, -GPTQ, ...) are never counted as the original: variant_candidates refuses those.
REUPLOADERS = frozenset({"nousresearch", "unsloth"})


def alias_match(hub_id: str, aliases: Iterable[str]) -> tuple[str, tuple[str, ...]] | None:
    """(the alias, the variant suffixes by which the id differs from it: none for the alias itself, `base` for the id
    without the alias's suffixes) for a Hub id that is one of `aliases` or a variant of one (instruct, base, chat,
    dated: hub.VARIANT_SUFFIX); None otherwise. A quantized checkpoint's id is no variant."""
    spelt = {alias.lower(): alias for alias in aliases}
    if (alias := spelt.get(hub_id.lower())) is not None:
        return alias, ()
    if QUANTIZED.search(hub_id.partition("/")[2]):
        return None
    bases = {base_form(alias)[0]: alias for alias in spelt.values()}
    base, removed = base_form(hub_id)
    return (bases[base], removed or ("base",)) if base in bases else None  # no suffix: the base of a suffixed alias


def reupload_candidates(hub_id: str, owners: set[str]) -> Iterator[tuple[str, str]]:
    """(the base form it may share with a preset's hf_id, why) for a re-upload: the same name under each owner."""
    owner, _, name = hub_id.partition("/")
    if owner.lower() not in REUPLOADERS:
        return
    for original in sorted(owners):
        for candidate, why in variant_candidates(f"{original}/{name}"):
            yield candidate, f"a re-upload by {owner} of {original}/{name}, its config.json copied; {why}"
