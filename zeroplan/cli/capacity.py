"""`zeroplan capacity`: the largest micro-batch, the fewest GPUs and the largest model per stage."""


import typer

from zeroplan.cli.common import render, run, scenario_args, show
from zeroplan.cli.groups import takes
from zeroplan.cli.options import FINETUNE, HARDWARE, MODEL, OFFLOAD, OUTPUT, TRAINING


@takes(MODEL, HARDWARE, TRAINING.without("fp32_grad_accum", "grad_accum"), FINETUNE, OFFLOAD,
       OUTPUT.without("html", "force"))
def capacity(ctx: typer.Context, **options) -> None:
    """Per stage: the largest micro-batch that fits, the fewest GPUs, and the largest model (scaled in depth)."""
    args = scenario_args(options, ctx)
    units, fmt = options["units"], options["fmt"]

    def go() -> None:
        from zeroplan.scenario import answers

        result = answers.capacity(args)
        show(lambda: result, lambda: render.capacity_renderables(result, units), fmt)

    run(go, fmt)
