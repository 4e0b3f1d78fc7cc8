"""`python -m zeroplan` runs the CLI."""

from zeroplan.cli import main

main()
