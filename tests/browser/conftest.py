"""Browser tests: Debian's Chromium driven by Playwright, every network request blocked."""

from __future__ import annotations

import pytest
from _chromium import RESULTS, chromium_path


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser" in str(item.fspath):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason='pip install "pallaslab[test]"')
    if chromium_path() is None:
        pytest.skip("Chromium is not installed: run `make browser-deps`")
    from _chromium import launch

    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A page that refuses (and records) every network request, and fails on page errors."""
    context = browser.new_context(viewport={"width": 1440, "height": 1100})
    pg = context.new_page()
    pg.requests_attempted = []
    pg.allowed = set()  # URLs a test opens on purpose (e.g. the report file itself)
    pg.errors = []

    def block(route):
        pg.requests_attempted.append(route.request.url)
        if route.request.url in pg.allowed:
            route.continue_()
        else:
            route.abort()

    pg.route("**/*", block)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()
    assert not pg.errors, pg.errors


@pytest.fixture(scope="session")
def results_dir():
    RESULTS.mkdir(exist_ok=True)
    return RESULTS
