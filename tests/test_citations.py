"""Every source the code, presets and docs cite is one a reader of the repository can open.

The research notes zeroplan was built from (`reference/*.md`, `seed/...`) live outside the repository, so a
citation of them resolves for nobody else: code, traces, presets and docs cite the public source the notes
name (a URL, `repo@commit:path`, a paper) or an in-repo file instead (docs/hardware.md derives what no single
public page states).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ("zeroplan", "configs", "docs", "README.md")  # what the package, its presets and its docs ship
ALSO_SCANNED = ("benchmarks", "validation", "tests")  # repository files a reader opens too
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".txt"}

PRIVATE = re.compile(
    r"(?<![\w.-])reference/[\w-]+\.md"  # reference/deepspeed.md, reference/hardware.md, ...
    r"|(?<![\w.-])seed/[\w.-]"  # seed/article-notes.md, seed/zero-article.zh.txt
    r"|(?<![\w-])shared/(?:reference|seed)\b|\.\./shared\b"  # the folder beside the checkout
    r"|(?<![\w/.-])(?:peers|aesthetics)\.md\b"  # research notes with no copy in the repository
    r"|\b(?:hw|ds) §"  # the shorthand docs/throughput.md once used for reference/hardware.md, deepspeed.md
    r"|(?<![\w/.-])(?:hardware|deepspeed)\.md (?:section |§ ?)?\d"  # numbered sections: only the private notes have them
)
DOCS_PATH = re.compile(r"(?<![\w/.@:-])docs/([\w-]+\.md)\b")  # an in-repo doc named by path (not another repo's docs/)
MD_LINK = re.compile(r"\]\(([^)#:\s]+\.md)(?:#[^)]*)?\)")  # a relative markdown link


def _files(*tops: str) -> list[Path]:
    found = []
    for top in tops:
        path = ROOT / top
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES
                      and "__pycache__" not in p.parts]
    return [p for p in found if p != Path(__file__).resolve()]


def _hits(path: Path, pattern: re.Pattern) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for m in pattern.finditer(text)]


def test_pattern_catches_the_private_citations():
    for cited in ("reference/deepspeed.md 4.4", "(reference/hardware.md 2e)", "seed/article-notes.md 5",
                  "`seed/article-notes.md` 4", "../shared/reference", "reference/peers.md section 1.2",
                  "peers.md 2.3", "hw §2c", "ds §5g", "(hardware.md section 6)", "(deepspeed.md 2.3)", "deepspeed.md §6"):
        assert PRIVATE.search(cited), cited
    for public in ("docs/hardware.md", "[hardware.md](hardware.md)", "docs/deepspeed.md",
                   "deepspeedai/DeepSpeed@edaa7221:docs/_tutorials/zeropp.md", "ZeRO paper §7", "random seed",
                   "hf_reference/count.py", "stas00/ml-engineering@744d01e:network/README.md"):
        assert not PRIVATE.search(public), public


@pytest.mark.parametrize("top", PUBLISHED + ALSO_SCANNED)
def test_no_citation_of_the_private_notes(top):
    hits = [hit for path in _files(top) for hit in _hits(path, PRIVATE)]
    assert hits == [], "cite the public source the note names, or an in-repo file:\n" + "\n".join(hits)


@pytest.mark.parametrize("top", PUBLISHED)
def test_cited_in_repo_docs_exist(top):
    missing = []
    for path in _files(top):
        text = path.read_text(encoding="utf-8", errors="replace")
        missing += [f"{path.relative_to(ROOT)}: docs/{name}" for name in DOCS_PATH.findall(text)
                    if not (ROOT / "docs" / name).is_file()]
        if path.suffix == ".md":
            missing += [f"{path.relative_to(ROOT)}: ({link})" for link in MD_LINK.findall(text)
                        if not (path.parent / link).is_file()]
    assert missing == []


@pytest.mark.parametrize("kind", ["hardware", "models"])
def test_every_preset_source_is_a_public_url(kind):
    presets = sorted((ROOT / "configs" / kind).glob("*.yaml"))
    assert presets
    for path in presets:
        source = yaml.safe_load(path.read_text(encoding="utf-8"))["source"]
        assert isinstance(source, str) and re.match(r"https://[\w.-]+\.[a-z]{2,}/", source), path.name


def test_the_source_article_is_described_where_it_is_cited():
    advisor = (ROOT / "docs" / "advisor.md").read_text(encoding="utf-8")
    assert "## The source article" in advisor
    for section in ("2.1-2.2", "3.1", "3.3", "4.1", "4.2", "4.3", "5.1", "5.2", "5.3", "| 6 |"):
        assert section in advisor, section
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/advisor.md#the-source-article" in readme


def test_printed_sources_name_public_or_in_repo_sources():
    from zeroplan.advise.advisories import ONEBIT_SOURCE, ZEROPP_SOURCE
    from zeroplan.advise.trees.article import ARTICLE_TREE
    from zeroplan.memory.stage import OVERHEAD_SOURCE

    assert ARTICLE_TREE == "article 4.3 decision tree (docs/advisor.md)"
    assert OVERHEAD_SOURCE == "hardware profile (docs/hardware.md)"
    assert ONEBIT_SOURCE.endswith("(deepspeedai/DeepSpeed@edaa7221:deepspeed/runtime/engine.py)")
    assert ZEROPP_SOURCE.startswith("ZeRO++ (arXiv:2306.10209; DeepSpeed docs/_tutorials/zeropp.md)")
