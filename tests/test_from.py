"""Every Accelerate, LLaMA-Factory and axolotl file of the field corpus (tests/data/field/manifest.yaml) is either
read by `--from` (estimate exits 0 with every key it takes in the assumptions, and check runs it) or refused
with the one-line not-modelled error naming its keys.

The files are laid out again as in their repositories and run from the repository's root, as the tools run them:
LLaMA-Factory's `examples/deepspeed/...` and axolotl's `deepspeed_configs/...` are found from there.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from zeroplan.cli.app import app
from zeroplan.frameworks.source import read_framework_file

FIELD = Path(__file__).resolve().parent / "data" / "field"
MANIFEST = yaml.safe_load((FIELD / "manifest.yaml").read_text(encoding="utf-8"))
FRAMEWORK_FILES = {e["file"]: e for e in MANIFEST if e["kind"] in ("accelerate", "llamafactory", "axolotl")}
QWEN25_7B = Path(__file__).resolve().parent.parent / "configs" / "models" / "qwen2.5-7b.yaml"

LLAMA = ["--model", "meta-llama/Llama-3.1-8B"]  # an Accelerate config names no model: the Hub id of a preset
# file -> the options its run needs (its model is not a preset: Qwen3, gpt-oss, a mirror's id), or the keys refused.
READ = {
    "accelerate/hiyouga__LLaMA-Factory__examples__accelerate__fsdp_config.yaml": LLAMA,
    "accelerate/huggingface__accelerate__examples__alst_ulysses_sequence_parallelism__sp-alst.accelerate-config.yml": LLAMA,
    "accelerate/huggingface__accelerate__examples__config_yaml_templates__deepspeed.yaml": LLAMA,
    "accelerate/huggingface__accelerate__examples__config_yaml_templates__fsdp.yaml": LLAMA,
    "accelerate/huggingface__accelerate__examples__config_yaml_templates__multi_gpu.yaml": LLAMA,
    "accelerate/huggingface__trl__examples__accelerate_configs__deepspeed_zero1.yaml": LLAMA,
    "accelerate/huggingface__trl__examples__accelerate_configs__deepspeed_zero2.yaml": LLAMA,
    "accelerate/huggingface__trl__examples__accelerate_configs__deepspeed_zero3.yaml": LLAMA,
    "accelerate/huggingface__trl__examples__accelerate_configs__fsdp2.yaml": LLAMA,
    "accelerate/huggingface__trl__examples__accelerate_configs__multi_gpu.yaml": LLAMA,
    "llamafactory/hiyouga__LLaMA-Factory__examples__train_full__qwen3_full_sft.yaml": ["--params", "4.02e9"],
    "llamafactory/hiyouga__LLaMA-Factory__examples__train_full__qwen3vl_full_sft.yaml": ["--params", "4.44e9"],
    "llamafactory/hiyouga__LLaMA-Factory__examples__v1__train_full__train_full_deepspeed.yaml": ["--params", "0.6e9"],
    "axolotl/axolotl-ai-cloud__axolotl__examples__gpt-oss__gpt-oss-20b-fft-deepspeed-zero3.yaml": ["--params", "20.9e9"],
    "axolotl/axolotl-ai-cloud__axolotl__examples__llama-2__fft_optimized.yml": ["--model", "llama-2-7b"],  # NousResearch's copy
    # fine-tunes: their adapters and freeze rules name modules, so the model is given (a preset of the family)
    "llamafactory/hiyouga__LLaMA-Factory__examples__train_lora__qwen3_lora_sft_ds3.yaml": ["--model", "qwen3-8b"],
    "llamafactory/hiyouga__LLaMA-Factory__examples__train_qlora__qwen3_lora_sft_otfq.yaml": ["--model", "qwen3-8b"],
    "axolotl/axolotl-ai-cloud__axolotl__examples__jamba__qlora_deepspeed.yaml": ["--model", "llama-3.1-8b"],  # Jamba: not described
    "axolotl/axolotl-ai-cloud__axolotl__examples__llama-3__lora-1b-ray.yml": ["--model", "llama-3.1-8b"],
    "axolotl/axolotl-ai-cloud__axolotl__examples__mistral__mixtral__mixtral.yml": ["--model", "mixtral-8x7b"],
    "axolotl/axolotl-ai-cloud__axolotl__examples__llama-2__lora.yml": ["--model", "llama-2-7b"],
    # ASFT (use_asft_loss, --post-training asft): its model is a local path, models/Qwen2.5-7B
    "llamafactory/hiyouga__LLaMA-Factory__examples__extras__asft__qwen2_full_asft.yaml": ["--model", "qwen2.5-7b"],
}  # fmt: skip
REFUSED = {
    "llamafactory/hiyouga__LLaMA-Factory__examples__extras__fp8__llama3_fp8_deepspeed_sft.yaml": ["fp8: true (FP8 training)"],
    "llamafactory/hiyouga__LLaMA-Factory__examples__extras__llama_pro__llama3_freeze_sft.yaml":
        ["use_llama_pro: true (LLaMA Pro: expanded blocks)"],
    "axolotl/axolotl-ai-cloud__axolotl__examples__alst__llama3-8b-deepspeed-alst.yaml": ["context_parallel_size: 8"],
    "axolotl/axolotl-ai-cloud__axolotl__examples__gemma3__gemma-3-1b-qlora.yml":
        ["unfrozen_parameters: 2 patterns (beside adapter qlora)"],
    "axolotl/axolotl-ai-cloud__axolotl__examples__qwen3__reward-model.yaml": ["reward_model: true (a reward model"],
}  # fmt: skip


# Read as a mesh (advise plans data parallelism only and says so in one line unless --search-parallelism).
MESHED = {
    "accelerate/huggingface__trl__examples__accelerate_configs__alst_ulysses_4gpu.yaml":
        ("tp 1 x pp 1 x cp 2 x dp 2 = 4 GPUs (cp all-to-all (DeepSpeed-Ulysses))",
         "parallelism_config.parallelism_config_sp_size 2 is a sequence-parallel (DeepSpeed-Ulysses) mesh"),
}


# Read, but naming what the model does not have: one error line (not "not modelled"). Mixtral's experts are
# model.layers.i.mlp.experts.* in transformers 5, so these older block_sparse_moe patterns match nothing.
STALE = {
    "axolotl/axolotl-ai-cloud__axolotl__examples__mistral__bigstral__bigstral-ds-zero3.yaml":
        "unfrozen_parameters: model.layers.4[4-9]+.block_sparse_moe.gate matches no parameter of the model",
    "axolotl/axolotl-ai-cloud__axolotl__examples__mistral__mixtral__mixtral_22.yml":
        "unfrozen_parameters: model.layers.4[4-9]+.block_sparse_moe.gate matches no parameter of the model",
}  # fmt: skip


def test_every_framework_file_of_the_corpus_is_read_or_refused():
    assert sorted(READ.keys() | REFUSED.keys() | STALE.keys() | MESHED.keys()) == sorted(FRAMEWORK_FILES)
    assert not READ.keys() & REFUSED.keys() and not STALE.keys() & (READ.keys() | REFUSED.keys())
    assert not MESHED.keys() & (READ.keys() | REFUSED.keys() | STALE.keys())


@pytest.mark.parametrize("file", sorted(MESHED), ids=lambda f: f.split("__")[-1])
def test_a_field_file_with_a_mesh_is_estimated_on_it(runner, repos, monkeypatch, file):
    describe, advise_line = MESHED[file]
    path, res = _run_from_repo(runner, repos, monkeypatch, file, "estimate", *LLAMA, "-f", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["mesh"]["describe"] == describe
    _, checked = _run_from_repo(runner, repos, monkeypatch, file, "check", *LLAMA, "-f", "json")
    report = json.loads(checked.stdout)
    assert checked.exit_code == report["exit_code"] in (0, 1), checked.output
    assert not [f for plan in report["plans"] for f in plan["findings"] if f["rule"] == "invalid-input"]
    _, advised = _run_from_repo(runner, repos, monkeypatch, file, "advise", *LLAMA)
    assert advised.exit_code == 1 and advised.stderr.strip() == f"error: {path}: {advise_line}; advise plans data " \
        "parallelism only: add --search-parallelism to plan the mesh, or `zeroplan estimate --from` the file for " \
        "this layout", advised.output


@pytest.mark.parametrize("file", sorted(STALE), ids=lambda f: f.split("__")[-1])
def test_a_pattern_matching_no_parameter_is_one_error_line(runner, repos, monkeypatch, file):
    _, res = _run_from_repo(runner, repos, monkeypatch, file, "estimate", "--model", "mixtral-8x7b")
    assert res.exit_code == 1 and STALE[file] in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> Path:
    """Every corpus file at its path in its repository; LLaMA-Factory's local model folder models/Qwen2.5-7B too."""
    root = tmp_path_factory.mktemp("repos")
    for entry in MANIFEST:
        target = root / entry["repo"] / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIELD / entry["file"], target)
    folder = root / "hiyouga" / "LLaMA-Factory" / "models" / "Qwen2.5-7B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(yaml.safe_load(QWEN25_7B.read_text(encoding="utf-8"))["config"]))
    return root


def _run_from_repo(runner, repos, monkeypatch, file: str, *args: str):
    entry = FRAMEWORK_FILES[file]
    monkeypatch.chdir(repos / entry["repo"])
    return entry["path"], runner.invoke(app, [args[0], "--from", entry["path"], *args[1:]])


@pytest.mark.parametrize("file", sorted(READ), ids=lambda f: f.split("__")[-1])
def test_a_field_file_is_read(runner, repos, monkeypatch, file):
    path, res = _run_from_repo(runner, repos, monkeypatch, file, "estimate", *READ[file], "-f", "json")
    assert res.exit_code == 0, res.output
    assumptions = json.loads(res.stdout)["assumptions"]
    name = Path(path).name
    for taken in read_framework_file(Path(path)).taken:
        assert any(a.startswith(f"{name}: {taken.key}") for a in assumptions), taken.key
    _, checked = _run_from_repo(runner, repos, monkeypatch, file, "check", *READ[file], "-f", "json")
    report = json.loads(checked.stdout)
    assert checked.exit_code == report["exit_code"] in (0, 1), checked.output
    assert not [f for plan in report["plans"] for f in plan["findings"] if f["rule"] == "invalid-input"]
    _, advised = _run_from_repo(runner, repos, monkeypatch, file, "advise", *READ[file], "-f", "json")
    if json.loads(res.stdout)["setup"]["post_training"] != "sft":  # the step's time is SFT's only: one line
        assert advised.exit_code == 1 and "are not timed" in advised.stderr, advised.output
    else:
        assert advised.exit_code == 0, advised.output
        assert json.loads(advised.stdout)["assumptions"][0].endswith("options given on the command line override them")
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for key in data:  # every key accounted for: taken, or listed as not used with why
        assert any(a.startswith(f"{name}: {key}") or f" {key}," in a + "," for a in assumptions), key


@pytest.mark.parametrize("file", sorted(REFUSED), ids=lambda f: f.split("__")[-1])
@pytest.mark.parametrize("command", ["estimate", "check", "advise"])
def test_a_field_file_is_refused_in_one_line(runner, repos, monkeypatch, file, command):
    path, res = _run_from_repo(runner, repos, monkeypatch, file, command, *LLAMA)
    assert res.exit_code == 1, res.output
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"error: {path}: ") and "Traceback" not in res.output
    assert line.endswith("is not modelled yet")
    for words in REFUSED[file]:
        assert words in line
