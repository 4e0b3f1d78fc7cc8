"""The HTML reports, as headless Chromium draws them at 1400 px: docs/shots/{estimate,advise,check}.png and
docs/report.png (the README's picture: the top of the estimate page), regenerated from the same pages.

Usage: python scripts/report_screenshots.py [OUT_DIR]   (default: docs/shots; docs/report.png beside it)

Needs Chromium (`apt-get update && apt-get install chromium`); pngquant, when installed, shrinks the files.
tests/test_report.py runs `shoot` into a temporary folder (marked slow; skipped without Chromium).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 1400  # px: a laptop browser window
# (name, the command, the window height that holds the page)
PAGES = (
    ("estimate", ["estimate", "--model", "llama-3.1-8b", "--gpus", "8"], 2700),
    ("advise", ["advise", "--model", "qwen3-32b", "--seq-len", "4096"], 2300),
    ("check", ["check", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs" / "plans").glob("*.yaml"))], 2500),
)
README_HEIGHT = 1000  # docs/report.png: the estimate page's first screen


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def shoot(out_dir: Path, readme: Path | None = None) -> list[Path]:
    """Write each page's HTML (zeroplan's CLI, --html) and its screenshot into `out_dir`; `readme`: also the
    estimate page's first screen there. Returns the screenshots written."""
    browser = chromium()
    if browser is None:
        raise SystemExit("chromium is not installed (apt-get update && apt-get install chromium)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:  # run there, so the page's command line reads as a user's
        (Path(tmp) / "configs").symlink_to(ROOT / "configs")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
        for name, command, height in PAGES:
            page = Path(tmp) / f"{name}.html"
            subprocess.run([sys.executable, "-m", "zeroplan", *command, "--html", page.name], cwd=tmp, env=env,
                           capture_output=True, check=False)  # check exits 1: one example plan is meant to fail
            written.append(_screenshot(browser, page, out_dir / f"{name}.png", height))
            if readme is not None and name == "estimate":
                written.append(_screenshot(browser, page, readme, README_HEIGHT))
    return written


def _screenshot(browser: str, page: Path, target: Path, height: int) -> Path:
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={WIDTH},{height}", f"--screenshot={target}", page.as_uri()],
                   capture_output=True, check=True, timeout=120)
    if shutil.which("pngquant"):
        subprocess.run(["pngquant", "--force", "--skip-if-larger", "--quality=75-95", "--ext", ".png", str(target)],
                       check=False)
    return target


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "shots"
    for path in shoot(out, readme=ROOT / "docs" / "report.png"):
        print(f"wrote {path}")
