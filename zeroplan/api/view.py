"""A result as the data `--format json` prints (docs/json.md): the CLI's own views, chosen by the result's type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zeroplan.api.arguments import member, typed
from zeroplan.errors import ZeroplanError
from zeroplan.memory.estimate import Estimate
from zeroplan.units import Unit

if TYPE_CHECKING:
    from zeroplan.advise.advice import Advice
    from zeroplan.advise.layouts.result import LayoutAdvice
    from zeroplan.check.runner import CheckReport


@typed
def to_dict(result: Estimate | Advice | LayoutAdvice | CheckReport, *, units: Unit | str = Unit.gib) -> dict[str, Any]:
    """What `--format json` prints for `result`: the same keys and integers (docs/json.md, docs/advisor.md,
    docs/checks.md). `units` is the display unit an estimate names (`"gib"` or `"gb"`); bytes stay bytes."""
    if isinstance(result, Estimate):
        from zeroplan.memory.view import estimate_view

        return estimate_view(result, member(Unit, units, "--units"))
    from zeroplan.advise.advice import Advice
    from zeroplan.advise.layouts.result import LayoutAdvice
    from zeroplan.check.runner import CheckReport

    if isinstance(result, Advice):
        from zeroplan.advise.view import advice_view

        return advice_view(result)
    if isinstance(result, CheckReport):
        from zeroplan.check.formats import check_view

        return check_view(result)
    if isinstance(result, LayoutAdvice):
        from zeroplan.advise.layouts.view import layout_advice_view

        return layout_advice_view(result)
    raise ZeroplanError(f"to_dict takes an Estimate, an Advice, a LayoutAdvice or a CheckReport, "
                        f"not {type(result).__name__}")
