"""Launching Debian's Chromium with Playwright (never a downloaded browser build)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
RESULTS = Path(__file__).resolve().parents[2] / "test-results"


def chromium_path() -> str | None:
    for candidate in (os.environ.get("PALLASLAB_CHROMIUM"), "/usr/bin/chromium",
                      shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def launch(playwright):
    path = chromium_path()
    if path is None:
        raise RuntimeError("Chromium not found: run `make browser-deps` (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS, headless=True)
