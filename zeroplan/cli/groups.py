"""Option groups: each declared once, with its help panel, and spliced into the signature of every command that
takes it, so an option added to a group reaches every such command.

typer reads a command's options from its signature (`inspect.signature`, which honours `__signature__`), so a
group is a tuple of keyword-only `inspect.Parameter`s whose annotations carry `typer.Option(...,
rich_help_panel=...)`, and `takes(*groups)` sets the command's `__signature__` to its own parameters plus the
groups'. The command receives the groups' values in `**options`. benchmarks/typer_floor.py builds its
signature the same way.
"""

import inspect
from dataclasses import dataclass
from typing import Annotated, Any, Callable

import typer
from typer.core import TyperCommand

KEYWORD = inspect.Parameter.KEYWORD_ONLY
OUTPUT_PANEL = "Output"  # listed last in --help, after the command's own panels
OTHER_PANEL = "Options"  # what has no panel (--help)
ARGUMENTS_PANEL = "Arguments"  # a command's positional arguments, listed first


@dataclass(frozen=True)
class OptionGroup:
    """Options a command takes together, shown under one panel of --help."""

    panel: str
    params: tuple[inspect.Parameter, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(param.name for param in self.params)

    def without(self, *names: str) -> "OptionGroup":
        """The group less the named parameters (a command that has no use for them)."""
        unknown = set(names) - set(self.names)
        if unknown:
            raise ValueError(f"{self.panel} has no option {sorted(unknown)}")
        return OptionGroup(self.panel, tuple(p for p in self.params if p.name not in names))


def option(name: str, kind: Any, default: Any, *flags: str, **settings: Any) -> tuple:
    """One option as a group declares it: parameter name, type, default, flags (none: typer's --name) and
    typer.Option's settings (help, min, max...)."""
    return name, kind, default, flags, settings


def group(panel: str, *options: tuple) -> OptionGroup:
    """The options under `panel`, as keyword-only parameters with typer annotations."""
    return OptionGroup(panel, tuple(
        inspect.Parameter(name, KEYWORD, default=default,
                          annotation=Annotated[kind, typer.Option(*flags, rich_help_panel=panel, **settings)])
        for name, kind, default, flags, settings in options
    ))


def takes(*groups: OptionGroup) -> Callable:
    """Decorator: the command takes these groups' options (in --help in this order), then its own parameters.

    A parameter the command declares itself under a group option's name replaces that option in its place (a
    command's variant of it: advise's --checkpointing takes a level, sweep's --format its own formats).
    """

    def splice(command: Callable) -> Callable:
        own = {name: p for name, p in inspect.signature(command).parameters.items()
               if p.kind is not inspect.Parameter.VAR_KEYWORD}
        taken = [p for g in groups for p in g.params]
        names = {p.name for p in taken}
        params = [own[p.name].replace(kind=KEYWORD) if p.name in own else p for p in taken]
        params += [p.replace(kind=KEYWORD) for name, p in own.items() if name not in names]
        command.__signature__ = inspect.Signature(params)
        return command

    return splice


class PanelledCommand(TyperCommand):
    """Plain click help, one section per help panel (the app keeps rich_markup_mode=None, under which typer
    lists every option in one section: rich's panels cut long option names with an ellipsis at 80 columns)."""

    def format_options(self, ctx, formatter) -> None:
        sections: dict[str, list] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                sections.setdefault(_panel(param), []).append(record)
        for title in sorted(sections, key=_section_order):  # stable: the others as the signature has them
            with formatter.section(title):
                formatter.write_dl(sections[title])


def _section_order(title: str) -> int:
    return {ARGUMENTS_PANEL: -1, OUTPUT_PANEL: 1, OTHER_PANEL: 2}.get(title, 0)


def _panel(param) -> str:
    if param.param_type_name == "argument":
        return ARGUMENTS_PANEL
    return getattr(param, "rich_help_panel", None) or OTHER_PANEL
