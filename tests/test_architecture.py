"""House rules checked: the import graph (floors, no circles, typer and rich only in cli/) and the pinned CLI surface."""

import ast
import functools
from pathlib import Path

import typer.main

from zeroplan.cli.app import app

ROOT = Path(__file__).resolve().parent.parent / "zeroplan"
# The floors, lowest first (STYLE.md, "The shape of the house"). A module imports only from floors below
# its own, or from its own package; modules on the ground floor may import each other.
FLOORS = {
    "errors": 0, "units": 0, "version": 0, "frozen": 0, "validate": 0, "readers": 0, "jsonsource": 0, "registry": 0,
    "printable": 0,
    "models": 1, "hardware": 1,
    "memory": 2,
    "perf": 3, "deepspeed": 3, "megatron": 3, "frameworks": 3, "calibration": 3,
    "scenario": 4,
    "advise": 5, "check": 5,
    "cli": 6, "api": 6,
    "__init__": 7, "__main__": 7,
}
UI = {"typer", "rich", "click"}  # only cli/ prints, parses argv or draws
NEVER = {"torch", "transformers", "peft", "deepspeed"}  # the core stays free of them (the [hf] extra aside)
# The zeroplan[hf] extra: only these modules may import torch/transformers, and only HF's torch-free __init__ may
# import them (inside its functions), so `import zeroplan` and every described family stay torch-free.
HF_PACKAGE = "zeroplan.models.hf"
HF_CORE = {HF_PACKAGE, HF_PACKAGE + ".records", HF_PACKAGE + ".nearest"}  # the extra's torch-free modules, which the core imports


def _in_extra(module: str) -> bool:
    """One of the extra's modules that may import torch (the package's modules but its torch-free core)."""
    return module.startswith(HF_PACKAGE + ".") and module not in HF_CORE


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function, read from the source (nothing imported)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name} | {m for m in _imports(path) if m.split(".")[0] != "zeroplan"}
            for name, path in modules.items()}


def _floor(module: str) -> tuple[int, str]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return FLOORS[top], top


def test_every_package_has_a_floor():
    assert sorted({_floor(m)[1] for m in import_graph()} - set(FLOORS)) == []


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each 'module -> target' where target sits on a higher floor, or on the same floor in another package."""
    upward = []
    for module, targets in graph.items():
        level, package = _floor(module)
        for target in (t for t in targets if t.startswith("zeroplan.")):
            t_level, t_package = _floor(target)
            if t_package != package and not (t_level < level or level == t_level == 0):
                upward.append(f"{module} -> {target}")
    return upward


def import_circles(graph: dict[str, set[str]]) -> list[str]:
    """Each circle found by a depth-first walk, as 'a -> b -> a'."""
    graph = {m: {t for t in ts if t.startswith("zeroplan.") and t in graph} for m, ts in graph.items()}
    state: dict[str, int] = {}
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append(" -> ".join(path[path.index(target):] + [target]) if target in path else f"{module} -> {target}")
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return circles


def outside_the_cli(graph: dict[str, set[str]], libraries: set[str]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                  if t.split(".")[0] in libraries and not m.startswith("zeroplan.cli"))


def test_imports_go_down_the_floors():
    assert upward_imports(import_graph()) == []


def test_no_import_circles():
    assert import_circles(import_graph()) == []


def test_only_the_cli_imports_typer_or_rich():
    assert outside_the_cli(import_graph(), UI) == []


def training_stack_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each 'module -> torch...' outside the [hf] extra's torch modules (its __init__ is not one of them)."""
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                  if t.split(".")[0] in NEVER and not _in_extra(m))


def into_the_extra(graph: dict[str, set[str]]) -> list[str]:
    """Each import of one of the extra's torch modules from outside its package."""
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                  if _in_extra(t) and not m.startswith(HF_PACKAGE))


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_the_core_imports_no_training_stack():
    assert training_stack_imports(import_graph()) == []
    assert into_the_extra(import_graph()) == []


def test_the_extras_entry_loads_torch_only_inside_its_functions():
    """zeroplan.models.hf's __init__ is what the core calls: its top-level imports reach no torch module."""
    top = {m for m in _top_level_imports(ROOT / "models" / "hf" / "__init__.py")
           if m in import_graph() or not m.startswith("zeroplan.")}  # modules, not the names taken from them
    assert {m for m in top if m.split(".")[0] in NEVER or _in_extra(m)} == set()
    assert any(_in_extra(t) for t in import_graph()[HF_PACKAGE])  # it does load them, lazily


def test_the_torch_rules_can_fail():
    bad = {
        "zeroplan.memory.stage": {"torch"},
        "zeroplan.models.hf": {"transformers", "zeroplan.models.hf.build"},  # the extra's __init__ is core
        "zeroplan.models.hf.build": {"torch", "transformers"},
        "zeroplan.models.hf.records": {"torch"},  # imported by the core: no torch either
        "zeroplan.scenario": {"zeroplan.models.hf.probe", "zeroplan.models.hf", "zeroplan.models.hf.records"},
    }
    assert training_stack_imports(bad) == ["zeroplan.memory.stage -> torch", "zeroplan.models.hf -> transformers",
                                           "zeroplan.models.hf.records -> torch"]
    assert into_the_extra(bad) == ["zeroplan.scenario -> zeroplan.models.hf.probe"]


def test_the_graph_checks_can_fail():
    """Each check finds what it is for in a small graph that has it."""
    bad = {
        "zeroplan.memory.stage": {"zeroplan.cli.app", "zeroplan.memory.terms", "rich"},  # up, and rich below the CLI
        "zeroplan.memory.terms": {"zeroplan.memory.stage"},  # a circle inside one package
        "zeroplan.cli.app": {"typer", "zeroplan.memory.stage"},
    }
    assert upward_imports(bad) == ["zeroplan.memory.stage -> zeroplan.cli.app"]
    assert import_circles(bad) == ["zeroplan.cli.app -> zeroplan.memory.stage -> zeroplan.cli.app",
                                   "zeroplan.memory.stage -> zeroplan.memory.terms -> zeroplan.memory.stage"]
    assert outside_the_cli(bad, UI) == ["zeroplan.memory.stage -> rich"]
    assert "zeroplan.memory.setup" in import_graph()["zeroplan.memory.stage"]  # the real graph is read


def _options(command) -> set[str]:  # a click Command (typer >= 0.29 vendors click: no import)
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}


# The frozen option surface (torchtitan's test_no_new_cli_options idea): a new flag is a deliberate edit here.
SCENARIO = {
    "--model", "-m", "--params", "--largest-layer", "--gpus", "-g", "--nodes", "-n", "--hardware",
    "--precision", "--optimizer", "--seq-len", "--micro-batch", "--checkpointing", "--attention", "--loss", "--post-training",
    "--teacher",  # knowledge distillation's teacher model (docs/finetune.md, post-training)
    "--offload-optimizer", "--offload-param", "--units", "--format", "-f",
    "--optimizer-impl",  # AdamW's foreach / fused / for-loop step (docs/engines.md, optimizer impl)
}
# The fine-tuning modes (docs/finetune.md), on every command that estimates one run.
FINETUNE = {"--freeze", "--lora-rank", "--lora-targets", "--lora-dropout", "--dora", "--modules-to-save", "--qlora",
            "--quant-type", "--double-quant", "--quant-storage", "--load-in-8bit", "--adapter-config",
            "--optimizer-in-backward", "--adapter-dtype", "--qlora-stack", "--bnb-version"}

FROZEN = {
    "estimate": SCENARIO | FINETUNE | {
        "--stage", "-s", "--fp32-grad-accum", "--grad-accum", "--reduce-bucket-size", "--overlap-comm",
        "--no-overlap-comm", "--prefetch-bucket-size", "--max-live-parameters", "--param-persistence-threshold",
        "--sub-group-size", "--hpz-partition-size", "--cuda-context-gib", "--nccl-gib", "--fragmentation",
        "--method", "--buffer-factor", "--deepspeed-config", "--engine",
        "--from", "--from-kind",  # an Accelerate, LLaMA-Factory or axolotl file (docs/inputs.md)
        "--tp", "--pp", "--cp", "--ep", "--vpp", "--pp-schedule", "--sequence-parallel",  # the mesh, for --method megatron (docs/megatron.md)
        "--cp-comm",  # p2p (ring) or a2a (DeepSpeed-Ulysses) context parallelism (docs/parallelism.md)
        "--pp-first-layers", "--pp-last-layers",  # uneven pipeline splits (docs/parallelism.md)
        "--html", "--force",  # the self-contained HTML report, and replacing an existing one (docs/report.md)
        "--reduce-dtype", "--no-sync", "--adapter-wrap",  # PyTorch engine settings (docs/engines.md)
        "--compile",  # torch.compile of each block: AOTAutograd's saved tensors (docs/activations.md)
        "--training-loop",  # whose loop runs the micro-steps: what it keeps between them (docs/activations.md)
        "--float8", "--float8-all-gather",  # torchao Float8Linear training; FSDP2's float8 all-gather (docs/float8.md)
    },
    "capacity": SCENARIO | FINETUNE,
    "check": (SCENARIO - {"--offload-optimizer", "--offload-param", "--units"}) | FINETUNE | {
        "plans", "--grad-accum", "--ignore", "--strict", "--output", "-o", "--force", "--deepspeed-config",
        "--from", "--from-kind", "--html",
    },
    # advise sizes the micro-batch and chooses offload itself: no --micro-batch, --offload-*.
    "advise": SCENARIO - {"--micro-batch", "--offload-optimizer", "--offload-param"} | FINETUNE | {
        "--global-batch", "--topology", "--policy", "--policy-file", "--set", "--emit-deepspeed", "--force",
        "--engine",  # the search runs over the stages the engine supports (zeroplan.engines.supported_stages)
        "--emit-accelerate",  # the FSDP / DDP counterpart of --emit-deepspeed
        "--from", "--from-kind", "--html",
        "--search-parallelism", "--stack", "--emit-torchtitan",  # the parallelism search (docs/advisor.md)
    },
    "throughput": SCENARIO - {"--units"} | {
        "--grad-accum", "--overlap-comm", "--no-overlap-comm", "--prefetch-bucket-size", "--hpz-partition-size",
        "--topology", "--mfu", "--sweep", "--max-micro-batch", *FINETUNE,
        "--tp", "--pp", "--cp", "--ep", "--vpp", "--pp-schedule", "--sequence-parallel",  # the mesh (docs/throughput.md "Mesh")
        "--cp-comm",  # p2p (ring) or a2a (DeepSpeed-Ulysses) context parallelism (docs/parallelism.md)
        "--pp-first-layers", "--pp-last-layers",  # uneven pipeline splits (docs/parallelism.md)
    },
    # The grid's axes replace --gpus/--nodes/--micro-batch; --checkpointing and --offload-* take comma lists here.
    "sweep": {
        "--model", "-m", "--params", "--largest-layer", "--hardware", "--precision", "--optimizer", "--seq-len",
        "--attention", "--stages", "--gpu-counts", "--micro-batches", "--checkpointing", "--offload-optimizer",
        "--offload-param", "--units", "--format", "-f", "--optimizer-impl", "--post-training", "--teacher",
    } | FINETUNE,
    "models": {"--format", "-f"},
    "hardware": {"--format", "-f"},
}
# estimate's run options, without how estimate prints (--method, --buffer-factor, --html): calibrate takes the same
# option groups (cli/estimate.py RUN), so the two cannot drift.
FROZEN["calibrate"] = (FROZEN["estimate"] - {"--method", "--buffer-factor", "--html"}) | {"records", "--save", "--plan"}
# --calibration: a `zeroplan calibrate --save` file applied (docs/calibrate.md)
FROZEN["estimate"] = FROZEN["estimate"] | {"--calibration"}
FROZEN["calibrate"] = FROZEN["calibrate"] | {"--calibration"}
FROZEN["advise"] = FROZEN["advise"] | {"--calibration"}


def test_cli_option_surface_is_pinned():
    group = typer.main.get_command(app)
    actual = {name: _options(cmd) for name, cmd in group.commands.items()}
    assert actual == FROZEN


def test_help_lists_commands_in_the_order_users_reach_for_them():
    from zeroplan.cli.app import COMMAND_ORDER

    names = list(typer.main.get_command(app).commands)
    assert tuple(names) == COMMAND_ORDER
