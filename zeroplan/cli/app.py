"""The typer app: each command's module, registered in the order a new user reaches for them, and the entry point."""

import os
import sys

import typer

from zeroplan.cli import advise, capacity, check, estimate, presets, sweep, throughput

APP_SETTINGS = dict(
    add_completion=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app = typer.Typer(
    name="zeroplan",
    help="Plan DeepSpeed ZeRO training runs: per-GPU memory per stage, throughput, advice, CI checks.",
    no_args_is_help=True,
    **APP_SETTINGS,
)
# --help lists the commands in the order a new user reaches for them.
app.command()(estimate.estimate)
app.command()(advise.advise)
app.command()(check.check)
app.command()(capacity.capacity)
app.command()(throughput.throughput)
app.command()(sweep.sweep)
app.command("models")(presets.list_models)
app.command("hardware")(presets.list_hardware)
COMMAND_ORDER = ("estimate", "advise", "check", "capacity", "throughput", "sweep", "models", "hardware")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point.

    `zeroplan COMMAND ...` builds only COMMAND's click command: typer converts every registered command's
    options on each start (~8 ms a command), and a run needs one. Anything else (--help, no command, a
    typo) goes through the whole app, so listings and suggestions stay complete.
    """
    # pydantic scans installed entry points for plugins on first validation (~20 ms); the CLI uses none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    argv = sys.argv[1:] if argv is None else argv
    info = next((c for c in app.registered_commands if argv and _command_name(c) == argv[0]), None)
    if info is None:
        app(args=argv, prog_name="zeroplan")
        return
    single = typer.Typer(**APP_SETTINGS)
    single.registered_commands.append(info)
    single(args=argv[1:], prog_name=f"zeroplan {argv[0]}")


def _command_name(info) -> str:
    return info.name or info.callback.__name__.replace("_", "-")
