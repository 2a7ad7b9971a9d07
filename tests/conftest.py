import os
from unittest import mock

import pytest

# The real Celery worker process of the real tier; the phases, their markers and time budget.
pytest_plugins = ["tests.phases", "tests.worker_fixtures"]

# ---------------------------------------------------------------- web: users, clients, dispatch
# Fixtures of the forms and views tests (the browser's are in tests/browser/conftest.py).


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
