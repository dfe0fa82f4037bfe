"""Headless Chromium for the dashboard tests, driven by Playwright (tests/web/browser.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.web.browser import checked_page, chromium

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with checked_page(browser) as opened:
        yield opened


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots of the main views go: ``$VIRTPLANE_SCREENSHOTS`` (scripts/screenshots.sh
    sets it to docs/screenshots), else a temporary directory, so a test run changes no file."""
    wanted = os.environ.get("VIRTPLANE_SCREENSHOTS")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
