"""The console's browser tests: one headless Debian Chromium per session (driven by
Playwright's Python package, which downloads no browser of its own), pages served by the
real admin app on 127.0.0.1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("WAYLINE_CHROMIUM", "/usr/bin/chromium"))
# Chromium as root needs --no-sandbox; the rest keep it off the (closed) network at start.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


# Package scope, not session: Playwright's sync API keeps an event loop running in the
# main thread while it is open, and every later test's `asyncio.run` would refuse to start.
@pytest.fixture(scope="package")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise RuntimeError(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium package")
    with sync_playwright() as playwright:
        # Playwright gives the browser a new, empty profile (--user-data-dir) of its own.
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tests save screenshots of the main pages: docs/console/ when
    WAYLINE_CONSOLE_SCREENSHOTS names it (to refresh the README's), else a temp dir."""
    chosen = os.environ.get("WAYLINE_CONSOLE_SCREENSHOTS")
    target = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target
