"""Headless Chromium for the dashboard tests, driven by Playwright; skipped when either is missing
(a failure in a full run, VIRTPLANE_QEMU_REQUIRED=1).

Playwright's own browser downloads are never used: it drives the system Chromium
(Debian package ``chromium``) at ``/usr/bin/chromium``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import FULL_RUN

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Dialog, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    missing = pytest.fail if FULL_RUN else pytest.skip  # in a full run the browser is there
    if not os.access(CHROMIUM, os.X_OK):
        missing(f"{CHROMIUM} is missing (Debian package chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install playwright; the test extra has it)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (its own session storage) with a desktop-sized window; fails on script errors."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[Any] = []

    def on_error(error: Any) -> None:
        errors.append(error)

    def on_dialog(dialog: Dialog) -> None:
        errors.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    page.on("pageerror", on_error)
    page.on("dialog", on_dialog)
    page.set_default_timeout(20_000)
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"the page raised script errors or opened dialogs: {errors}"


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots of the main views go: ``$VIRTPLANE_SCREENSHOTS`` (scripts/screenshots.sh
    sets it to docs/screenshots), else a temporary directory, so a test run changes no file."""
    wanted = os.environ.get("VIRTPLANE_SCREENSHOTS")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
