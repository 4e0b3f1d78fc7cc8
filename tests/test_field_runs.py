"""validation/field_runs.yaml (published, measured runs) and the docs/validation.md it regenerates: the data is
complete (a URL, a counter, zeroplan's arguments or why not for every run), each counter is compared with the
part of the peak it sees, and the committed page is what the data and today's zeroplan give."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("field_runs", ROOT / "validation" / "field_runs.py")
field_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(field_runs)


def test_at_least_twenty_runs_each_with_a_source_and_a_counter():
    runs = field_runs.load()
    assert len(runs) >= 20 and len({r["id"] for r in runs}) == len(runs)
    assert {r["measurement"] for r in runs} <= set(field_runs.KINDS)
    assert any(r["expressible"] for r in runs)


def test_a_run_without_why_is_refused(tmp_path):
    bad = tmp_path / "runs.yaml"
    bad.write_text("runs:\n  - {id: x, source: {url: 'https://example.org'}, row: r, setup: {}, measured_gib: 1,\n"
                   "     measurement: nvidia-smi, expressible: false}\n")
    with pytest.raises(ValueError, match="x: not expressible but no why"):
        field_runs.load(bad)


def test_each_counter_sees_its_part_of_the_peak():
    stage = {"gpu_bytes": {"total": 100, "overhead": 30},
             "overhead": [{"name": "CUDA context", "bytes": 5}, {"name": "NCCL buffers", "bytes": 10},
                          {"name": "fragmentation 5%", "bytes": 15}]}
    assert field_runs.compared_bytes(stage, "nvidia-smi") == 100
    assert field_runs.compared_bytes(stage, "max_memory_reserved") == 85  # the allocator never holds context or NCCL
    assert field_runs.compared_bytes(stage, "max_memory_allocated") == 70
    assert field_runs.compared_bytes(stage, "peak_memory_active") == 70


def test_docs_validation_is_regenerated():
    runs = field_runs.load()
    results = {r["id"]: field_runs.compare(r) for r in runs if r["expressible"]}
    assert (ROOT / "docs" / "validation.md").read_text(encoding="utf-8") == field_runs.render(runs, results), (
        "docs/validation.md is stale: run python validation/field_runs.py")
