"""The experiment form in real Chromium: log in, build the arms in the page, submit, and
find the experiment in the history."""

import os
from pathlib import Path
from unittest import mock

import pytest
from django.conf import settings

from experiments.models import Experiment
from tests.browser.login import log_in
from tests.factories import PASSWORD

# Playwright's sync API runs an event loop in this thread; the ORM calls here are plain.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
DRAFT_PATH = str(settings.SPECDASH_MODELS_DIR / "draft")


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


def _shot(page, name):
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


def _arm(page, index, field):
    return page.locator(f"[name='arms-{index}-{field}']")


def test_define_and_submit_an_experiment(page, live_server, user, celery_dispatch):
    page.goto(f"{live_server.url}/")
    assert "/login/" in page.url
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    _shot(page, "01-login")
    page.click(".login [type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.click("text=New experiment")
    # The design defaults come from the model: at most 10 blocks added until settled, a fresh
    # server per block, a 2 % margin.
    assert page.input_value("#id_repetitions") == "10"
    assert page.is_checked("#id_sequential")
    assert page.is_checked("#id_server_per_block")
    assert not page.is_checked("#id_aa_replicate")
    assert float(page.input_value("#id_equivalence_margin")) == 2.0
    assert "without verdicts" in page.inner_text("#design")
    assert "variance between server starts" in page.inner_text("#design")
    page.check("#id_aa_replicate")
    page.fill("#id_name", "browser: n-gram vs draft")
    page.fill("#id_concurrency_levels", "1, 4, 4")

    # The first arm: n-gram, k=4, with its lookup fields shown and no path field.
    _arm(page, 0, "method").select_option("ngram")
    _arm(page, 0, "num_speculative_tokens").fill("4")
    assert _arm(page, 0, "prompt_lookup_min").is_visible()
    assert not _arm(page, 0, "model").is_visible()

    # A second arm: draft model, k=4, with its path.
    page.click("#add-arm")
    _arm(page, 1, "method").select_option("draft_model")
    _arm(page, 1, "num_speculative_tokens").fill("4")
    _arm(page, 1, "model").fill(DRAFT_PATH)
    assert not _arm(page, 1, "prompt_lookup_min").is_visible()

    # A third arm, typed into and removed again.
    page.click("#add-arm")
    _arm(page, 2, "label").fill("throw away")
    page.locator("[data-arm]").nth(2).locator(".arm-remove").click()
    assert not _arm(page, 2, "label").is_visible()
    assert page.locator("[name='arms-TOTAL_FORMS']").input_value() == "3"
    assert _arm(page, 1, "model").input_value() == DRAFT_PATH
    assert _arm(page, 1, "method").input_value() == "draft_model"
    _shot(page, "02-form-filled")

    # The duplicate concurrency level is refused next to its field; the arms survive.
    page.click("#experiment-form [type=submit]")
    page.wait_for_selector("#id_concurrency_levels_errors")
    assert "4 is listed twice." in page.inner_text("#id_concurrency_levels_errors")
    assert _arm(page, 1, "model").input_value() == DRAFT_PATH
    assert not _arm(page, 1, "prompt_lookup_min").is_visible()
    assert not _arm(page, 2, "label").is_visible()
    assert not Experiment.objects.exists()
    _shot(page, "03-form-refused")

    # Four arms at the default of 10 blocks could outlast the worker's hold on the task: the form
    # says so (above every field) until the maximum comes down.
    page.fill("#id_concurrency_levels", "1, 4")
    page.click("#experiment-form [type=submit]")
    page.wait_for_selector("text=this experiment could take up to")
    page.fill("#id_repetitions", "6")
    page.click("#experiment-form [type=submit]")
    page.wait_for_selector(".message.success")
    experiment = Experiment.objects.get()
    assert page.url == f"{live_server.url}/experiments/{experiment.pk}/"
    assert [(a.method, a.num_speculative_tokens, a.is_replicate) for a in experiment.arms.all()] == [
        ("baseline", None, False), ("baseline", None, True), ("ngram", 4, False), ("draft_model", 4, False),
    ]  # fmt: skip
    assert (experiment.repetitions, experiment.sequential, experiment.server_per_block) == (6, True, True)
    assert sorted(set(experiment.runs.values_list("repetition", flat=True))) == [1, 2, 3]  # the first 3 queued
    assert experiment.equivalence_margin == pytest.approx(0.02)
    assert experiment.arms.get(method="draft_model").params == {"model": DRAFT_PATH}
    # One message per queued block (issue 38): each idle worker of the queue can claim one.
    assert celery_dispatch.call_args_list == [mock.call(args=[experiment.id], queue="cpu")] * experiment.blocks.count()
    _shot(page, "04-detail")

    page.click("text=History")
    row = page.locator("#experiment-table tr", has_text="browser: n-gram vs draft")
    assert row.count() == 1
    assert "n-gram lookup k=4" in row.inner_text()
    assert "Draft model k=4" in row.inner_text()
    _shot(page, "05-history")


def test_a_queue_without_a_live_worker_is_pointed_out_before_submitting(page, live_server, user):
    """The live queues (a `cpu` worker, tests/conftest.py) are listed with their hardware; a
    typed queue no live worker listens on is warned about, and not refused."""
    log_in(page, live_server.url, user.username)
    page.click("text=New experiment")

    assert page.inner_text("#live-queues-list") == "Live workers: cpu (1 worker, CPU: Test CPU)"
    assert page.locator("#live-queues option").evaluate_all("options => options.map(o => o.value)") == ["cpu"]
    assert not page.is_visible("#queue-not-live")
    page.fill("#id_worker_queue", "h100")
    assert page.inner_text("#queue-not-live") == (
        "No live worker listens on queue h100: the experiment will wait until one joins."
    )
    _shot(page, "06-queue-without-worker")
    page.fill("#id_worker_queue", "cpu")
    assert not page.is_visible("#queue-not-live")
