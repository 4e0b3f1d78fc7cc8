"""House rules checked: pure modules stay import-light and the CLI surface changes only on purpose."""

import subprocess
import sys

import pytest
import typer.main

from zeroplan.cli import app

# Pure modules: no I/O, no rich/typer/yaml (STYLE.md). Every new pure module joins this list.
PURE = [
    "spec", "record", "frozen", "units", "recipes", "memory", "engine", "estimate", "capacity", "dscompat", "views",
    "perf", "sweep", "grid", "collectives", "flops", "schedule",
    "checks", "checks_config", "findings", "dsconfig", "dskeys", "hfauto", "jsonsource",
    "plan", "checks_memory", "checks_fabric", "checkformats", "dsbatch", "dsconfig_model",
    "policy", "advice", "candidates", "steps", "tree_article", "tree_default", "advisories", "advisor", "dsemit",
    "accelerate_emit",
    "views_advice", "activations", "activation_terms", "activation_traits",
    "engines", "engines.layout", "engines.storage", "engines.ddp", "engines.fsdp",
]
HEAVY = ["rich", "typer", "yaml", "torch"]


def test_pure_modules_import_no_heavy_dependency():
    code = "import sys\n" + "".join(f"import zeroplan.{m}\n" for m in PURE) + f"print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# The estimate path answers without pydantic, PyYAML or the model families (docs/benchmarks.md): its
# inputs and results are zeroplan.record records and the bundled presets come from configs/index.json.
FAST_PATH = [
    ["estimate", "--params", "9e9", "--gpus", "8"],
    ["estimate", "--params", "9e9", "--gpus", "8", "-f", "json"],
    ["estimate", "--model", "gemma2-9b", "--hardware", "a100-sxm-80gb", "--checkpointing", "full"],
    ["estimate", "--model", "mixtral-8x7b", "--gpus", "16", "--nodes", "2", "--offload-optimizer", "cpu", "-f", "json"],
]


@pytest.mark.parametrize("argv", FAST_PATH, ids=lambda a: " ".join(a))
def test_the_estimate_path_imports_no_pydantic_yaml_or_families(argv):
    code = (
        "import io, sys\nfrom zeroplan.cli import main\nsys.stdout = io.StringIO()\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "sys.__stdout__.write(repr(sorted({m.split('.')[0] if not m.startswith('zeroplan') else m for m in sys.modules}"
        " & {'pydantic', 'pydantic_core', 'yaml', 'zeroplan.families', 'zeroplan.params'})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _options(command) -> set[str]:  # a click Command (typer >= 0.29 vendors click: no import)
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}


# The frozen option surface (torchtitan's test_no_new_cli_options idea): a new flag is a deliberate edit here.
SCENARIO = {
    "--model", "-m", "--params", "--largest-layer", "--gpus", "-g", "--nodes", "-n", "--hardware",
    "--precision", "--optimizer", "--seq-len", "--micro-batch", "--checkpointing", "--attention",
    "--offload-optimizer", "--offload-param", "--units", "--format", "-f",
}
FROZEN = {
    "estimate": SCENARIO | {
        "--stage", "-s", "--fp32-grad-accum", "--grad-accum", "--reduce-bucket-size", "--overlap-comm",
        "--no-overlap-comm", "--prefetch-bucket-size", "--max-live-parameters", "--param-persistence-threshold",
        "--sub-group-size", "--hpz-partition-size", "--cuda-context-gib", "--nccl-gib", "--fragmentation",
        "--method", "--buffer-factor", "--deepspeed-config", "--engine",
    },
    "capacity": SCENARIO,
    "check": (SCENARIO - {"--offload-optimizer", "--offload-param", "--units"}) | {
        "plans", "--grad-accum", "--ignore", "--strict", "--output", "-o", "--force", "--deepspeed-config",
    },
    # advise sizes the micro-batch and chooses offload itself: no --micro-batch, --offload-*.
    "advise": SCENARIO - {"--micro-batch", "--offload-optimizer", "--offload-param"} | {
        "--global-batch", "--topology", "--policy", "--policy-file", "--set", "--emit-deepspeed", "--force",
        "--engine",  # the search runs over the stages the engine supports (zeroplan.engines.supported_stages)
        "--emit-accelerate",  # the FSDP / DDP counterpart of --emit-deepspeed
    },
    "throughput": SCENARIO - {"--units"} | {
        "--grad-accum", "--overlap-comm", "--no-overlap-comm", "--prefetch-bucket-size", "--hpz-partition-size",
        "--topology", "--mfu", "--sweep", "--max-micro-batch",
    },
    # The grid's axes replace --gpus/--nodes/--micro-batch; --checkpointing and --offload-* take comma lists here.
    "sweep": {
        "--model", "-m", "--params", "--largest-layer", "--hardware", "--precision", "--optimizer", "--seq-len",
        "--attention", "--stages", "--gpu-counts", "--micro-batches", "--checkpointing", "--offload-optimizer",
        "--offload-param", "--units", "--format", "-f",
    },
    "models": {"--format", "-f"},
    "hardware": {"--format", "-f"},
}


def test_cli_option_surface_is_pinned():
    group = typer.main.get_command(app)
    actual = {name: _options(cmd) for name, cmd in group.commands.items()}
    assert actual == FROZEN


def test_help_lists_commands_in_the_order_users_reach_for_them():
    from zeroplan.cli import COMMAND_ORDER

    names = list(typer.main.get_command(app).commands)
    assert tuple(names) == COMMAND_ORDER
