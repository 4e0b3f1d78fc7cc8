"""zeroplan's fine-tune activations against validation/finetune_activations.json (measure_finetune_activations.py).

Needs no torch: tests/test_finetune_validation.py holds every row within 2 %; this script prints the comparison or
rewrites the tables of docs/finetune.md between their markers.
    python validation/compare_finetune_activations.py [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zeroplan.memory.activations import activation_bytes  # noqa: E402
from zeroplan.memory.activations.tuning import tuned_activations  # noqa: E402
from zeroplan.memory.finetune import ALL_LINEAR, Finetune, tune  # noqa: E402
from zeroplan.memory.quant import Quant  # noqa: E402
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup  # noqa: E402
from zeroplan.models.named import named_parameters  # noqa: E402
from zeroplan.models.presets import model_from_data  # noqa: E402

ACTS = json.loads((ROOT / "validation" / "finetune_activations.json").read_text())
DOCS = ROOT / "docs" / "finetune.md"
MARKS = {"summary": ("<!-- BEGIN fine-tune activations summary (validation/compare_finetune_activations.py) -->",
                     "<!-- END fine-tune activations summary -->"),
         "cases": ("<!-- BEGIN fine-tune activation cases (validation/compare_finetune_activations.py) -->",
                   "<!-- END fine-tune activation cases -->")}
ADAPTER_BYTES = 4  # peft's autocast_adapter_dtype: fp32 adapters on the bf16 base (and on fp32)
# rows whose fine-tune leaves nothing trainable (a tied head frozen with everything else): zeroplan refuses them
NOTHING = {(r["family"], r["dtype"], r["mode"]) for r in ACTS["rows"] if r.get("trainable_params", 1) == 0}
TRAINS = [r for r in ACTS["rows"] if (r["family"], r["dtype"], r["mode"]) not in NOTHING]


def model_type(row) -> str:
    """A row's family is the harness's key (gpt_neox-sequential, falcon-new): its config names the model type."""
    return ACTS["config"][row["family"]].get("model_type", row["family"])


def spec_of(row):
    return model_from_data({"model_type": row["family"], **ACTS["config"][row["family"]]}, "tiny", hf_name="tiny")


def finetune_of(row) -> Finetune:
    lora = row["lora"]
    if lora is None:
        return Finetune(freeze=tuple(row["freeze"]))
    targets = lora["target_modules"]
    quant = {"quant": Quant.nf4, "double_quant": True} if lora.get("qlora") else {}
    return Finetune(lora_rank=lora["r"], lora_targets=(ALL_LINEAR,) if targets == ALL_LINEAR else tuple(targets),
                    lora_dropout=lora["lora_dropout"], dora=lora.get("use_dora", False), **quant)


def predicted(row) -> int:
    spec, finetune = spec_of(row), finetune_of(row)
    tuning = None if finetune.full else tune(named_parameters(spec), finetune, model_type(row))
    attention = Attention.eager if row.get("attention") == "eager" else Attention.flash
    setup = TrainingSetup(precision=Precision.fp32 if row["dtype"] == "fp32" else Precision.bf16_mixed,
                          seq_len=row["seq_len"], micro_batch=row["micro_batch"],
                          checkpointing=Checkpointing(row["checkpointing"]), attention=attention)
    acts = activation_bytes(spec.architecture(), setup)
    if tuning is None:
        return acts.total_bytes
    # The weight bitsandbytes dequantizes is transient (dequant_bytes), not in total_bytes.
    return tuned_activations(acts, spec.architecture(), setup, tuning, ADAPTER_BYTES).total_bytes


def error(row) -> float:
    return (predicted(row) - row["measured"]) / row["measured"]


def summary() -> str:
    lines = ["| family | cases | worst error |", "|---|---:|---:|"]
    for family in dict.fromkeys(r["family"] for r in TRAINS):
        mine = [r for r in TRAINS if r["family"] == family]
        lines.append(f"| {family} | {len(mine)} | {100 * max(abs(error(r)) for r in mine):.2f}% |")
    return "\n".join(lines)


def cases() -> str:
    lines = ["| family | dtype | checkpointing | mode | measured B | zeroplan B | error |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in TRAINS:
        lines.append(f"| {r['family']} | {r['dtype']} | {r['checkpointing']} | {r['mode']} | {r['measured']:,} | "
                     f"{predicted(r):,} | {100 * error(r):+.2f}% |")
    return "\n".join(lines)


def write_docs() -> None:
    text = DOCS.read_text()
    for key, table in (("summary", summary()), ("cases", cases())):
        begin, end = MARKS[key]
        head, rest = text.split(begin)
        _, tail = rest.split(end)
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    DOCS.write_text(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write-docs", action="store_true", help="rewrite the tables of docs/finetune.md")
    args = parser.parse_args(argv)
    if args.write_docs:
        write_docs()
    print(summary())


if __name__ == "__main__":
    main()
