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
    from workers import tasks

    with mock.patch.object(tasks.experiment_execute, "apply_async") as apply_async:
        yield apply_async


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium driven by Playwright, which cannot download its own browser here."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
