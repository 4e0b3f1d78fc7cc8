"""`python -m zeroplan` runs the CLI."""

from zeroplan.cli.app import main

main()
