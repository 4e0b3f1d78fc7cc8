"""The start-up floor: a bare typer command with one option that prints one rich table.

Usage: python benchmarks/typer_floor.py run [--rows N]

bench.py budgets `zeroplan estimate` and `zeroplan advise` as ratios to this command (the standard's floor:
what any typer command that prints a rich table costs before it does anything of its own). Running it
parses its one option, as any typer command does, and prints a 5-column table of `--rows` rows (12 by
default, about the size of the estimate's first table). typer >= 0.29 converts every option value through
pydantic (typer/_adapters.py), so pydantic's validators are part of it.
"""

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False)


@app.command()
def run(rows: Annotated[int, typer.Option(help="rows in the table")] = 12) -> None:
    """Print one table."""
    table = Table("row", "a", "b", "c", "d")
    for i in range(rows):
        table.add_row(str(i), *(f"{i * k / 7:.2f}" for k in range(1, 5)))
    Console().print(table)


app.command("other")(lambda: None)  # two commands, so the command name is parsed as in zeroplan

if __name__ == "__main__":
    app()
