"""Exit codes (docs/hardening.md): 0 clean, 1 findings (a run that does not fit, a check that fails), 2 usage.
A file the command would write that already exists is the user's choice of path: usage, exit 2."""

import pytest

from zeroplan.cli.app import app

PLAN = "configs/plans/pcie-llama3.1-8b-zero2.yaml"
FAILING_PLAN = "configs/plans/gemma2-9b-zero0-8xh100.yaml"  # 183 GiB at ZeRO-0 on 80 GiB GPUs

WRITERS = {
    "estimate --html": ["estimate", "--params", "1e9", "--html"],
    "advise --html": ["advise", "--params", "1e9", "--html"],
    "advise --emit-deepspeed": ["advise", "--params", "1e9", "--emit-deepspeed"],
    "advise --emit-accelerate": ["advise", "--params", "1e9", "--engine", "fsdp", "--emit-accelerate"],
    "advise --emit-torchtitan": ["advise", "--model", "llama-3.1-8b", "--search-parallelism", "--emit-torchtitan"],
    "check --html": ["check", PLAN, "--html"],
    "check --output": ["check", PLAN, "-f", "junit", "--output"],
}


@pytest.mark.parametrize("writer", WRITERS)
def test_an_existing_output_file_is_a_usage_error(runner, tmp_path, writer):
    target = tmp_path / "exists"
    target.write_text("mine\n")
    res = runner.invoke(app, [*WRITERS[writer], str(target)])
    assert (res.exit_code, res.stdout) == (2, "") and "already exists; pass --force" in res.stderr
    assert target.read_text() == "mine\n" and len(res.stderr.strip().splitlines()) == 1


def test_zero_clean_one_findings_two_usage(runner):
    assert runner.invoke(app, ["check", PLAN]).exit_code == 0
    assert runner.invoke(app, ["check", FAILING_PLAN]).exit_code == 1
    assert runner.invoke(app, ["estimate", "--no-such-option"]).exit_code == 2
    # estimate's "does not fit" is its answer, not a finding (docs/hardening.md): exit 0
    assert runner.invoke(app, ["estimate", "--params", "70e9", "--gpus", "1", "--stage", "0"]).exit_code == 0
