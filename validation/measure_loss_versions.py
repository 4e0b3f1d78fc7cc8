"""transformers' causal-LM loss across its versions, measured on CPU: writes loss_versions.json.

What the head and the cross-entropy keep changed twice (`--loss hf`, `hf-shift`, `hf-legacy`):
  legacy  transformers before 4.46 (4.45.2 models/llama/modeling_llama.py lines 1213-1229; 4.36.2 lines 1199-1213):
          `logits = self.lm_head(hidden_states).float()`, returned in the outputs; then
          `shift_logits = logits[..., :-1, :].contiguous()`, `shift_labels = labels[..., 1:].contiguous()`,
          CrossEntropyLoss on the flattened views
  shift   4.46.0 to 4.48.x (4.47.1 loss/loss_utils.py ForCausalLMLoss lines 32-46): the 16-bit logits returned,
          the loss function upcasts (`logits = logits.float()`) and shifts as above
  hf      4.49 and later: the installed transformers' own ForCausalLMLoss (labels padded and shifted, the logits
          not copied)
The two old versions' op sequences are written out here from the lines cited (the wheels: `pip download
transformers==4.45.2 --no-deps`); the current one is called. Each case runs a 16-bit LM head on a hidden state that
needs a gradient (the frozen-head case of an adapter fine-tune and full training's alike: the head's input is saved
either way) and records, with measure_reference.LiveBytes (every storage an op made and still alive): the largest
bytes alive while the forward runs, the bytes still alive when the loss returns with the outputs dropped (HF
Trainer's compute_loss returns the loss alone), and the largest while the backward runs down to the head.
    python validation/measure_loss_versions.py [--print]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import transformers
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_reference import LiveBytes  # noqa: E402

OUT = Path(__file__).resolve().parent / "loss_versions.json"
CASES = [(1, 64, 32, 1000), (2, 48, 64, 1536), (4, 17, 16, 512)]  # (b, s, h, V)


def legacy(head: nn.Linear, hidden: torch.Tensor, labels: torch.Tensor):
    logits = head(hidden).float()
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    loss = nn.CrossEntropyLoss()(shift_logits.view(-1, logits.shape[-1]), shift_labels.view(-1))
    return loss, logits


def shift(head: nn.Linear, hidden: torch.Tensor, labels: torch.Tensor):
    logits = head(hidden)

    def loss_function(logits, labels, vocab_size):  # ForCausalLMLoss, 4.47.1, without num_items_in_batch
        logits = logits.float()
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        return nn.functional.cross_entropy(shift_logits.view(-1, vocab_size), shift_labels.view(-1),
                                           ignore_index=-100, reduction="mean")
    return loss_function(logits, labels, logits.shape[-1]), logits


def current(head: nn.Linear, hidden: torch.Tensor, labels: torch.Tensor):
    from transformers.loss.loss_utils import ForCausalLMLoss

    logits = head(hidden)
    return ForCausalLMLoss(logits, labels, logits.shape[-1]), logits


VERSIONS = {"hf-legacy": legacy, "hf-shift": shift, "hf": current}


def measure(loss_fn, b: int, s: int, h: int, vocab: int) -> dict:
    torch.manual_seed(0)
    head = nn.Linear(h, vocab, bias=False, dtype=torch.bfloat16)
    hidden = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (b, s))
    with LiveBytes(head.weight, hidden, labels) as live:
        loss, logits = loss_fn(head, hidden, labels)
        forward_peak = live.peak
        kept_logits = logits.untyped_storage().nbytes()
        del logits  # the Trainer drops the outputs: only the loss and its graph are left
        after = live.restart()
        loss.backward()
        backward_peak = live.peak
    return {"b": b, "s": s, "h": h, "vocab": vocab, "logits": kept_logits, "forward_peak": forward_peak,
            "after_forward": after, "backward_peak": backward_peak}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--print", action="store_true", help="print the rows; do not write the file")
    args = parser.parse_args(argv)
    rows = [{"loss": name, **measure(fn, *case)} for name, fn in VERSIONS.items() for case in CASES]
    for row in rows:
        print(row, file=sys.stderr)
    if not args.print:
        OUT.write_text(json.dumps({"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                                   "dtype": "bfloat16", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
