"""A typer command that does nothing: the start-up typer itself costs a command like `zeroplan estimate`.

Usage: python benchmarks/typer_floor.py run [--o0 N ...]

bench.py times it beside the floor. One command with 35 integer options, as many as `zeroplan estimate`
has; running it parses its options, as any typer command does, and returns. typer >= 0.29 converts every
option value through pydantic (typer/_adapters.py imports pydantic.types), which the floor's lazy
`import pydantic` does not load, so this row shows what is left of the budget for zeroplan's own work.
"""

import inspect
from typing import Annotated

import typer

OPTIONS = 35  # `zeroplan estimate`'s option count (typer.main.get_command(app).commands["estimate"].params)

app = typer.Typer(add_completion=False)


def run(**values: int | None) -> None:
    """Parse the options and return."""


# A signature with OPTIONS keyword options, built once so the option list is not written out 35 times.
run.__signature__ = inspect.Signature([
    inspect.Parameter(f"o{i}", inspect.Parameter.KEYWORD_ONLY, default=None,
                      annotation=Annotated[int | None, typer.Option(help=f"option {i}")])
    for i in range(OPTIONS)
])
app.command()(run)
app.command("other")(lambda: None)  # two commands, so the command name is parsed as in zeroplan

if __name__ == "__main__":
    app()
