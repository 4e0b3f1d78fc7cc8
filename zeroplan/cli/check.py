"""`zeroplan check`: plans (or one DeepSpeed config) for CI, in text, JSON, GitHub annotations or JUnit XML.

Registered on the app by cli/app.py; option groups in cli/options.py (cli/groups.py), the error boundary in cli/common.py.
"""

from pathlib import Path
from typing import Annotated, Optional

import typer

from zeroplan.cli.common import print_renderables, run, scenario_args, write_out
from zeroplan.cli.groups import OUTPUT_PANEL, takes
from zeroplan.cli.options import FINETUNE, HARDWARE, INPUTS, INPUTS_PANEL, MODEL, OUTPUT, TRAINING, CheckFormat

CHECK_PANEL = "Check"


# The options after --deepspeed-config describe the run a ds_config or --from file is checked on.
@takes(INPUTS, MODEL, HARDWARE, TRAINING.without("fp32_grad_accum"), FINETUNE, OUTPUT.without("units"))
def check(
    ctx: typer.Context,
    plans: Annotated[Optional[list[str]], typer.Argument(help="Plan YAML files or globs (quoted globs are expanded too).", show_default=False)] = None,
    ignore: Annotated[Optional[list[str]], typer.Option("--ignore", rich_help_panel=CHECK_PANEL, help="Skip this rule id (repeatable), on top of each plan's ignore list.")] = None,
    strict: Annotated[bool, typer.Option("--strict", rich_help_panel=CHECK_PANEL, help="Exit 1 on warnings too.")] = False,
    deepspeed_config: Annotated[Optional[str], typer.Option("--deepspeed-config", rich_help_panel=INPUTS_PANEL, help="Check this DeepSpeed config, on the run the Model, Hardware and Training options describe, instead of plans.")] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", "-f", rich_help_panel=OUTPUT_PANEL, help="text, json, GitHub Actions annotations or JUnit XML.")] = CheckFormat.text,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", rich_help_panel=OUTPUT_PANEL, help="Write the json, github or junit report to this file instead of stdout.")] = None,
    **options,
) -> None:
    """Check plans (or one DeepSpeed config, or a --from file) for CI: exit 0 clean, 1 on errors (or warnings with --strict), 2 on usage errors."""
    args = scenario_args({**options, "deepspeed_config": deepspeed_config}, ctx)
    from_file, html, force = options["from_file"], options["html"], options["force"]

    def go() -> None:
        from zeroplan.check import runner as checkrun

        checkrun.check_usage(plans or [], args, machine_output=fmt is not CheckFormat.text, output=output)
        if output is not None:  # before any work, with the one rule and exit code every written file has
            from zeroplan.cli.files import check_target

            check_target(output, force)
        from zeroplan.cli.files import html_target

        report_path = html_target(html, force)
        if from_file:
            report = checkrun.check_from_file(args, ignore=ignore or [], strict=strict)
        elif deepspeed_config:
            report = checkrun.check_deepspeed_config(deepspeed_config, args, ignore=ignore or [], strict=strict)
        else:
            report = checkrun.check_plans(plans or [], ignore=ignore or [], strict=strict)
        if report_path is not None:  # before stdout: a closed stdout cannot lose it
            from zeroplan.check.formats import check_view
            from zeroplan.cli.files import write_report
            from zeroplan.cli.files import command_line
            from zeroplan.cli.render.html import check_report

            write_report(report_path, check_report(check_view(report), command_line("check")), force)
        _emit_check(report, fmt, output, force)
        raise typer.Exit(report.exit_code)

    run(go, fmt)


def _emit_check(report, fmt: CheckFormat, output: Path | None, force: bool) -> None:
    """The report on stdout (text through rich), or written to --output."""
    if fmt is CheckFormat.text:
        from zeroplan.cli.render.check import check_renderables

        print_renderables(check_renderables(report))
        return
    from zeroplan.check import formats as checkformats

    if fmt is CheckFormat.json:
        import json

        text = json.dumps(checkformats.check_view(report), indent=2) + "\n"
    else:
        text = checkformats.github_report(report) if fmt is CheckFormat.github else checkformats.junit_report(report)
    if output is None:
        write_out(text)
    else:
        from zeroplan.cli.files import write_new_file

        write_new_file(output, text, force=force)
