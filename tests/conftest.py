import os
from unittest import mock

import pytest

# The real Celery worker process of the integration tests.
pytest_plugins = ["tests.worker_fixtures"]

# ---------------------------------------------------------------- web: users, clients, dispatch, browser
# Fixtures of the forms, views and browser tests.

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def user(db):
    from tests.factories import UserFactory

    return UserFactory(username="alice")


@pytest.fixture
def logged_in_client(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def celery_dispatch():
    """Replace the Celery dispatch that experiment_create schedules on commit; yields the mock."""
    from experiments.execution import dispatch

    with mock.patch.object(dispatch, "task_send") as send:
        yield send


# What Celery's remote control answers in tests (experiments/execution/worker_queues.py): one worker on
# the `cpu` queue, the queue the factories and the form use.
LIVE_CPU_WORKER = (
    {"cpu@test-host": [{"name": "cpu"}]},
    {"cpu@test-host": {"host_name": "test-host", "cpu_model": "Test CPU", "gpu_name": "", "gpu_count": 0}},
)


@pytest.fixture(autouse=True)
def live_workers(monkeypatch):
    """Pages and the API ask which queues have live workers: here a `cpu` worker answers, without a
    broadcast, and nothing is remembered from one test to the next. A test changes the answer
    through the mock's return_value or side_effect."""
    from django.core.cache import cache

    from experiments.execution import worker_queues

    cache.clear()
    fake = mock.Mock(return_value=LIVE_CPU_WORKER)
    monkeypatch.setattr(worker_queues, "inspect_workers", fake)
    yield fake
    cache.clear()


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
    from tests.factories import PASSWORD

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click(".login [type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    yield page
    context.close()
    assert errors == [], errors


# ---------------------------------------------------------------- tests that share one experiment's rows


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Tests marked `shared_rows` run last, in their order, after pytest-django has put the plain
    database tests before the transactional ones (tests/worker_fixtures.shared_rows says why)."""
    items.sort(key=lambda item: item.get_closest_marker("shared_rows") is not None)


# ---------------------------------------------------------------- no silent skips where everything is set up

# `./dev test` (and so CI) builds the demo models and starts every service first, so a test
# skipped for a missing prerequisite means a broken set-up: there it fails instead.
REQUIRE_ALL = os.environ.get("SPECDASH_REQUIRE_ALL_TESTS") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ALL and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped where every prerequisite should exist (SPECDASH_REQUIRE_ALL_TESTS=1): {report.longrepr}"
        )
