"""The command line: the typer app, one module per command, rich renderers and JSON views. The only floor that prints or exits."""
