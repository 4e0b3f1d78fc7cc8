"""JSON text facts: comments blanked in place, key lines, duplicate keys."""

import json
import subprocess
import sys

import pytest

from zeroplan.jsonsource import locate_keys, scan_json_text, strip_comments

COMMENTED = """{
  // line comment
  "train_batch_size": 64, # hash comment
  /* block
     comment */
  "zero_optimization": {
    "stage": 3,
    "url": "http://host//path#frag /* not a comment */"
  }
}"""


def test_comments_blanked_keep_lines_and_strings():
    text, had = strip_comments(COMMENTED)
    assert had
    assert text.count("\n") == COMMENTED.count("\n")
    data = json.loads(text)
    assert data["zero_optimization"]["url"] == "http://host//path#frag /* not a comment */"


def test_plain_json_has_no_comments():
    text, had = strip_comments('{"a": "x // y"}')
    assert (text, had) == ('{"a": "x // y"}', False)


def test_key_lines_follow_nesting():
    source = scan_json_text(COMMENTED)
    assert source.key_lines == {
        "train_batch_size": 3,
        "zero_optimization": 6,
        "zero_optimization.stage": 7,
        "zero_optimization.url": 8,
    }
    assert source.has_comments
    assert source.duplicate_keys == ()


def test_duplicates_found_at_any_depth():
    text = '{\n"a": 1,\n"b": {"c": 1,\n "c": 2},\n"a": 3\n}'
    lines, duplicates = locate_keys(text)
    assert duplicates == (("b.c", 4), ("a", 5))
    assert lines["a"] == 2


def test_keys_inside_arrays_are_skipped():
    lines, _ = locate_keys('{"list": [{"inner": 1}], "after": 2}')
    assert set(lines) == {"list", "after"}


def test_escaped_quotes_in_keys():
    lines, _ = locate_keys('{"a\\"b": 1}')
    assert lines == {'a"b': 1}


@pytest.mark.parametrize("text", ["", "{", "}}]]", '{"a": ', '{"a" "b"}', "[1, 2"])
def test_invalid_json_never_raises(text):
    scan_json_text(text)


# Hostile texts that a backtracking scan handles in O(n^2) (73 s, 21 s and 512 s before the fix). Run in a
# subprocess with a timeout: the guard is against a hang, not a timing target (benchmarks/ measure speed).
HOSTILE = {
    "escaped quotes, never closed": "'\"' + '\\\\\"' * 40000",
    "comment openers, never closed": "'/* ' * 40000",
    "objects nested 100,000 deep": "'{\"a\":' * 100000",
}


@pytest.mark.parametrize("expr", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_json_is_refused_without_hanging(tmp_path, expr):
    path = tmp_path / "ds.json"
    code = (f"import pathlib; pathlib.Path({str(path)!r}).write_text({expr})\n"
            "from zeroplan.cli.app import main\nmain(['estimate', '--params', '7e9', '--deepspeed-config', "
            f"{str(path)!r}])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "ds.json" in out.stderr and "Traceback" not in out.stderr
