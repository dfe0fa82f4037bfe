"""Headless Chromium driven by Playwright's sync API, for the dashboard tests here and the real-guest
console test (tests/qemu): the system Chromium, a checked page, signing in through the page's form.

Playwright's own browser downloads are never used: it drives the system Chromium
(Debian package ``chromium``) at ``/usr/bin/chromium``. Missing either is a skip, but a
failure in a full run (VIRTPLANE_QEMU_REQUIRED=1).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import FULL_RUN

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Dialog, Page

CHROMIUM = "/usr/bin/chromium"
PAGE_TIMEOUT_MS = 20_000
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    """The system Chromium under Playwright, in this thread (sync API: no running event loop here)."""
    missing = pytest.fail if FULL_RUN else pytest.skip  # in a full run the browser is there
    if not os.access(CHROMIUM, os.X_OK):
        missing(f"{CHROMIUM} is missing (Debian package chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install playwright; the test extra has it)")
    from playwright.sync_api import expect

    # expect()'s own default is 5 s; on two loaded cores a drain's return migrations take longer
    # (seen at 1.1-1.6 s on a quiet machine). One bound for the page's waits and the checks.
    expect.set_options(timeout=PAGE_TIMEOUT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def checked_page(browser: Browser) -> Iterator[Page]:
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
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"the page raised script errors or opened dialogs: {errors}"


def sign_in(page: Page, url: str, token: str) -> None:
    """Through the login form of the dashboard at ``url``, as a person would."""
    from playwright.sync_api import expect

    page.goto(url + "/")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token-input", token)
    page.click("#login-submit")
