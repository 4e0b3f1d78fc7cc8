"""The Python API: what `import zeroplan` offers a notebook or another tool (docs/api.md).

Keyword-only functions over plain Python values -- counts as ints, floats or text ("9e9"), enums as their
values or members, paths as str or Path -- that return the typed objects the CLI renders: Estimate, Advice,
CheckReport, ParamCount, ModelSpec, HardwareSpec; `to_dict` turns the first three into the CLI's JSON data.
The defaults are the CLI's, read from the same places (the dataclasses in memory/setup.py, DEFAULT_HARDWARE,
advise/request.py). Bad input raises ZeroplanError (or pydantic's ValidationError) with the one-line message
the CLI prints, which names the CLI's option. Never prints, writes or exits.

By concept: `runs` (estimate, recommend, check_plans: a training run), `presets` (count_params and the model and
hardware presets), `view` (to_dict), and `arguments` (plain values -> the options as the CLI holds them).
"""

from zeroplan.api.presets import count_params, hardware_names, load_hardware, load_model, model_names
from zeroplan.api.runs import check_plans, estimate, recommend
from zeroplan.api.view import to_dict

__all__ = ["estimate", "recommend", "check_plans", "count_params", "model_names", "hardware_names", "load_model",
           "load_hardware", "to_dict"]
