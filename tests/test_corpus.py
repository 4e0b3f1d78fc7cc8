"""The --from corpus (tests/data/corpus/manifest.yaml): 228 real files from thirteen public repositories, each read
as its manifest entry says (kind, model, GPUs, engine, stage, precision, fine-tuning mode, length, micro-batch) or
refused in one line naming what is not modelled; never a traceback."""

import json
from pathlib import Path

import pytest
import yaml

from zeroplan.cli.app import app
from zeroplan.errors import SpecError
from zeroplan.frameworks.recognise import is_deepspeed_config
from zeroplan.frameworks.source import read_framework_file

ROOT = Path(__file__).resolve().parent / "data" / "corpus"
REPO = ROOT.parents[2]
MANIFEST = yaml.safe_load((ROOT / "manifest.yaml").read_text(encoding="utf-8"))


def _id(entry: dict) -> str:
    return entry["path"].rsplit("/", 2)[-2] + "/" + Path(entry["path"]).name + ("+" + Path(entry["with"][0]).stem if entry.get("with") else "")


def test_every_file_has_an_entry_with_its_source():
    assert {e["file"] for e in MANIFEST} == {str(p.relative_to(ROOT)) for p in ROOT.glob("*/*") if p.is_file()}
    assert len({e["file"] for e in MANIFEST}) >= 60
    for entry in MANIFEST:
        assert entry["url"] == f"https://github.com/{entry['repo']}/blob/{entry['commit']}/{entry['path']}"


@pytest.mark.parametrize("entry", [e for e in MANIFEST if not e.get("with")], ids=_id)
def test_the_kind_is_told_by_the_files_own_keys(entry, tmp_path, monkeypatch):
    path = ROOT / entry["file"]
    if "--deepspeed-config" in entry["args"]:  # run where the file's relative `deepspeed:` path is (its repository)
        written = yaml.safe_load(path.read_text(encoding="utf-8"))["deepspeed"]
        (tmp_path / written).parent.mkdir(parents=True)
        (tmp_path / written).write_text((REPO / entry["args"][entry["args"].index("--deepspeed-config") + 1]).read_text())
        monkeypatch.chdir(tmp_path)
    if entry["kind"] == "deepspeed":  # a ds_config.json: --from reads it as --deepspeed-config
        assert is_deepspeed_config(json.loads(path.read_text(encoding="utf-8")))
        return
    try:
        kind = read_framework_file(path).kind.value
    except SpecError:
        kind = "refused"
    assert kind == entry["kind"]


@pytest.mark.parametrize("entry", MANIFEST, ids=_id)
def test_a_corpus_file_is_read_as_recorded_or_refused_in_one_line(runner, entry):
    files = [entry["file"], *entry.get("with", [])]
    args = [str(REPO / a) if a.startswith("tests/data/") else a for a in entry["args"]]  # a file of the repository's
    res = runner.invoke(app, ["estimate", *[x for f in files for x in ("--from", str(ROOT / f))], *args, "-f", "json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    expect = entry["expect"]
    if "refused" in expect:
        line = res.stderr.strip()
        assert res.exit_code == 1 and len(line.splitlines()) == 1 and expect["refused"] in line
        return
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    stage = data["stages"][0]
    reading = {"model": data["model"]["name"], "gpus": data["parallelism"]["gpus"], "engine": data["engine"],
               "stage": stage.get("stage", stage.get("name")), "precision": data["setup"]["precision"],
               "mode": data["finetune"]["mode"] if data.get("finetune") else "full", "seq_len": data["setup"]["seq_len"],
               "micro_batch": data["setup"]["micro_batch"]}  # fmt: skip
    if data["setup"]["post_training"] != "sft":  # a preference trainer's file (memory.reference)
        reading["post_training"] = data["setup"]["post_training"]
    assert reading == expect


def test_the_readme_names_every_file_kind_read():
    from zeroplan.frameworks.kinds import kinds_sentence

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    assert f"every key used or listed as not used: {kinds_sentence()}." in readme
