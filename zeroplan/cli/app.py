"""The typer app: each command's module, registered in the order a new user reaches for them, and the entry point."""

import errno
import io
import os
import sys
from typing import Annotated

import typer

from zeroplan.cli import advise, calibrate, capacity, check, estimate, presets, sweep, throughput
from zeroplan.cli.groups import PanelledCommand

app = typer.Typer(
    name="zeroplan",
    help="Plan DeepSpeed ZeRO training runs: per-GPU memory per stage, throughput, advice, CI checks.",
    no_args_is_help=True,
    add_completion=False,
    # Plain click help, one section per option group (cli/groups.py PanelledCommand): rich's panels cut long
    # option names with an ellipsis at 80 columns (--fp32-grad-acc…).
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from zeroplan.version import __version__

        print(f"zeroplan {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Plan DeepSpeed ZeRO training runs: per-GPU memory per stage, throughput, advice, CI checks."""


# --help lists the commands in the order a new user reaches for them.
app.command(cls=PanelledCommand)(estimate.estimate)
app.command(cls=PanelledCommand)(advise.advise)
app.command(cls=PanelledCommand)(check.check)
app.command(cls=PanelledCommand)(capacity.capacity)
app.command(cls=PanelledCommand)(throughput.throughput)
app.command(cls=PanelledCommand)(sweep.sweep)
app.command(cls=PanelledCommand)(calibrate.calibrate)
app.command("models", cls=PanelledCommand)(presets.list_models)
app.command("hardware", cls=PanelledCommand)(presets.list_hardware)
COMMAND_ORDER = ("estimate", "advise", "check", "capacity", "throughput", "sweep", "calibrate", "models", "hardware")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point; argv defaults to sys.argv[1:]."""
    if sys.stdout is None:  # started with stdout closed (>&-): each write fails, as on a full disk
        sys.stdout = ClosedStdout()
    try:
        try:
            # standalone_mode=False: click's own usage errors (an unknown option, a bad value) come back as
            # exceptions, printed below in one line as zeroplan's own errors are, not as usage + hint + error
            code = app(args=argv, prog_name="zeroplan", standalone_mode=False)
        finally:
            sys.stdout.flush()  # output still buffered fails here, inside the handler, not at interpreter exit
    except typer.TyperException as exc:  # click's ClickException (typer 0.29's base): usage errors, exit 2
        if not (sys.argv[1:] if argv is None else argv):  # bare `zeroplan`: the help, as no_args_is_help shows it
            exc.show()
            sys.exit(exc.exit_code)
        from zeroplan.cli.common import print_error

        print_error(exc.format_message())
        sys.exit(exc.exit_code)
    except typer.Abort:  # Ctrl-C or end of input at a prompt, as click reports it in standalone mode
        from zeroplan.cli.common import print_error

        print_error("aborted")
        sys.exit(1)
    except OSError as exc:  # stdout is full, gone or closed
        if not isinstance(sys.stdout, ClosedStdout):
            # Python's recipe (docs: signal, "Note on SIGPIPE"): stdout to devnull, so the exit flush passes.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if not isinstance(exc, BrokenPipeError):  # a closed pipe is the reader's choice (head): silent, as click's
            from zeroplan.cli.common import print_error

            print_error(f"cannot write the output: {exc.strerror or exc}")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit(n) and --help come back as their exit code


class ClosedStdout(io.TextIOBase):
    """sys.stdout for a process started without one: every write is an OSError, none is lost silently."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "stdout is closed")
