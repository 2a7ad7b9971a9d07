"""Fixtures of the browser tests: Debian's headless Chromium, and pages logged in through the
login form as a user would."""

import pytest

from tests.browser.login import log_in

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium driven by Playwright, which cannot download its own browser here."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def logged_in_page(browser, live_server, user):
    """A page of a 1280 × 900 window, logged in as `user`, that may use the clipboard (the
    Copy buttons); a JavaScript error on it fails the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, live_server.url, user.username)
    yield page
    context.close()
    assert errors == [], errors
