"""The typer app: each command's module, registered in the order a new user reaches for them, and the entry point."""

import errno
import io
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
    if sys.stdout is None:  # started with stdout closed (>&-): each write fails, as on a full disk
        sys.stdout = ClosedStdout()
    try:
        try:
            _dispatch(sys.argv[1:] if argv is None else argv)
        finally:
            sys.stdout.flush()  # output still buffered fails here, inside the handler, not at interpreter exit
    except OSError as exc:  # stdout is full, gone or closed
        if not isinstance(sys.stdout, ClosedStdout):
            # Python's recipe (docs: signal, "Note on SIGPIPE"): stdout to devnull, so the exit flush passes.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if not isinstance(exc, BrokenPipeError):  # a closed pipe is the reader's choice (head): silent, as click's
            from zeroplan.cli.common import print_error

            print_error(f"cannot write the output: {exc.strerror or exc}")
        sys.exit(1)


def _dispatch(argv: list[str]) -> None:
    info = next((c for c in app.registered_commands if argv and _command_name(c) == argv[0]), None)
    if info is None:
        app(args=argv, prog_name="zeroplan")
        return
    single = typer.Typer(**APP_SETTINGS)
    single.registered_commands.append(info)
    single(args=argv[1:], prog_name=f"zeroplan {argv[0]}")


class ClosedStdout(io.TextIOBase):
    """sys.stdout for a process started without one: every write is an OSError, none is lost silently."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


def _command_name(info) -> str:
    return info.name or info.callback.__name__.replace("_", "-")
