"""Option groups (cli/groups.py): declared once, spliced into every command that takes them, one --help panel each."""

import re
from typing import Annotated

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from zeroplan.cli import options
from zeroplan.cli.app import app
from zeroplan.cli.groups import PanelledCommand, group, option, takes

COMMANDS = ("estimate", "advise", "check", "capacity", "throughput", "sweep")


def _demo_app(extra: tuple = ()) -> typer.Typer:
    """Two commands taking one group; `extra` options added to the group."""
    shared = group("Shared", option("alpha", int, 1, "--alpha", help="a"), *extra)
    demo = typer.Typer(rich_markup_mode=None)

    @demo.command(cls=PanelledCommand)
    @takes(shared)
    def one(**values) -> None:
        print(sorted(values.items()))

    @demo.command(cls=PanelledCommand)
    @takes(shared)
    def two(own: Annotated[int, typer.Option(rich_help_panel="Own", help="o")] = 0, **values) -> None:
        print(own, sorted(values.items()))

    return demo


def _option_names(demo: typer.Typer) -> dict[str, set[str]]:
    commands = typer.main.get_command(demo).commands
    return {name: {opt for p in cmd.params for opt in p.opts} for name, cmd in commands.items()}


def test_an_option_added_to_a_group_reaches_every_command_that_takes_it():
    before = _option_names(_demo_app())
    after = _option_names(_demo_app((option("beta", str, "b", "--beta", help="b"),)))
    assert {name: after[name] - before[name] for name in after} == {"one": {"--beta"}, "two": {"--beta"}}
    result = CliRunner().invoke(_demo_app((option("beta", str, "b", "--beta", help="b"),)),
                                ["two", "--beta", "x", "--own", "3"])
    assert result.exit_code == 0 and result.stdout == "3 [('alpha', 1), ('beta', 'x')]\n"


def test_a_commands_own_parameter_of_a_groups_name_replaces_it_in_place():
    shared = group("Shared", option("alpha", int, 1, help="a"), option("gamma", int, 3, help="g"))

    @takes(shared)
    def command(alpha: Annotated[str, typer.Option(help="mine")] = "x", **values) -> None: ...

    import inspect

    params = inspect.signature(command).parameters
    assert list(params) == ["alpha", "gamma"] and params["alpha"].default == "x"


def test_without_names_an_option_the_group_does_not_have():
    with pytest.raises(ValueError, match="no option"):
        options.TRAINING.without("micro_batches")


def test_help_is_one_section_per_panel(runner=CliRunner()):
    out = runner.invoke(app, ["estimate", "--help"], terminal_width=80).stdout
    sections = re.findall(r"^(\S[^:\n]*):$", out, re.M)
    assert sections == ["Model", "Input files", "Hardware", "Training", "Fine-tuning", "Engine and offload",
                        "DeepSpeed knobs", "Parallelism", "Method", "Output", "Options"]
    check = runner.invoke(app, ["check", "--help"], terminal_width=80).stdout
    assert re.findall(r"^(\S[^:\n]*):$", check, re.M)[0] == "Arguments"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_of_the_planning_commands_is_under_a_panel(command):
    click_command = typer.main.get_command(app).commands[command]
    unpanelled = [p.name for p in click_command.params
                  if p.param_type_name == "option" and not getattr(p, "rich_help_panel", None)]
    assert unpanelled == []


def test_the_fine_tuning_group_is_on_every_planning_command_whole():
    """The group the six commands all take: each has every one of its flags, under its panel."""
    commands = typer.main.get_command(app).commands
    for name in COMMANDS:
        panelled = {p.name: p.rich_help_panel for p in commands[name].params}
        assert {panelled.get(n) for n in options.FINETUNE.names} == {options.FINETUNE_PANEL}, name
