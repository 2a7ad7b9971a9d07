"""The team's review in real Chromium, with two users: alice finds last month's experiment
through the history's filters, runs it again, compares the two with their differences
stated, and proposes a decision citing them; bob sees it waiting for him on the history
page and approves it; the decisions page shows it; bob comments on the re-run.
Screenshots in test-artifacts/review-*.png."""

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from experiments.models import Arm, Decision, Experiment
from tests.browser.login import log_in
from tests.factories import UserFactory, complete_experiment, seed_finished_experiment

# Playwright's sync API runs an event loop in this thread; the ORM calls here are plain.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _shot(page, name):
    """Save the page, after checking that it fits the window's width (no sideways scrolling)."""
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), f"{name} is too wide"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"review-{name}.png", full_page=True)


def _open_as(browser, live_server, username):
    """A logged-in page of its own; JavaScript errors fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, live_server.url, username)
    return context, page, errors


@pytest.fixture
def history():
    """Last month's experiment by alice, among others of other months, models and methods."""
    alice, carol = UserFactory(username="alice"), UserFactory(username="carol")
    old = seed_finished_experiment(name="chat n-gram vs draft", owner=alice, seed=1)
    old.arms.filter(method=Arm.Method.DRAFT_MODEL).update(params={"model": str(settings.SPECDASH_MODELS_DIR / "draft")})
    month_ago = timezone.now() - timedelta(days=32)
    Experiment.objects.filter(pk=old.pk).update(created_at=month_ago, finished_at=month_ago + timedelta(hours=1))
    for days, name, owner in ((3, "this week", carol), (70, "two months ago", alice), (31, "same month, other", carol)):
        other = seed_finished_experiment(name=name, owner=owner, seed=days)
        Experiment.objects.filter(pk=other.pk).update(created_at=timezone.now() - timedelta(days=days))
    Experiment.objects.filter(name="same month, other").update(target_model="/models/other")
    Arm.objects.filter(experiment__name="same month, other", method=Arm.Method.NGRAM).update(method=Arm.Method.SUFFIX)
    UserFactory(username="bob")
    return old, month_ago.date()


def test_find_rerun_compare_propose_and_approve(browser, live_server, history, celery_dispatch):
    """`celery_dispatch` holds the re-run back from the real worker other modules start: the
    test plays the worker itself (complete_experiment)."""
    old, month_day = history
    context, page, errors = _open_as(browser, live_server, "alice")

    # Find last month's experiment through the filters.
    _shot(page, "1-history")
    page.fill("#id_since", str(month_day - timedelta(days=1)))
    page.fill("#id_until", str(month_day + timedelta(days=1)))
    page.select_option("#id_method", "ngram")
    page.click("#history-filters [type=submit]")
    page.wait_for_url(lambda url: "method=ngram" in url and "since=" in url)
    rows = page.locator("#experiment-table tbody tr")
    assert rows.count() == 1
    assert "chat n-gram vs draft" in rows.inner_text()
    assert "pays" in rows.inner_text()  # the headline's word for the service (the arm is faster, its guards hold)
    _shot(page, "2-history-filtered")

    # Run it again, asking for another vLLM.
    page.click("text=chat n-gram vs draft")
    page.click("#experiment-actions >> text=Run again")
    page.fill("#id_requested_vllm_version", "0.33.0")
    _shot(page, "3-rerun-form")
    page.click("#rerun-form [type=submit]")
    page.wait_for_selector("#origin")
    rerun = Experiment.objects.exclude(pk=old.pk).get(origin=old)
    assert (rerun.origin_kind, rerun.requested_vllm_version) == ("rerun", "0.33.0")

    # A worker on another host runs it (played here), on vLLM 0.33.0.
    complete_experiment(rerun, seed=9, worker_host="cpu-worker-2", vllm_version="0.33.0")
    page.reload()
    assert page.locator("#verdicts").count() == 1
    _shot(page, "4-rerun-finished")

    # Compare the two: the differences are stated, absolute figures labelled.
    page.click("#compare-origin")
    page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('chart-compare-absolute'))")
    differences = page.locator("#difference-table tbody tr")
    stated = {differences.nth(i).get_attribute("data-difference") for i in range(differences.count())}
    assert {"requested_vllm_version", "vllm_versions", "hosts"} <= stated
    assert "Absolute figures from different hosts" in page.inner_text("#host-warning")
    speedup = page.evaluate("Chart.getChart(document.getElementById('chart-compare-speedup')).data.datasets.length")
    assert speedup == 4
    page.click("[data-toggle=speedup] >> text=End-to-end latency")
    assert "end-to-end" in page.evaluate(
        "Chart.getChart(document.getElementById('chart-compare-speedup')).options.plugins.title.text"
    )
    _shot(page, "5-compare")

    # Propose a decision citing both.
    page.click("#propose-decision")
    page.fill("#id_service", "chat")
    page.check("input[name=kind][value=deploy]")
    ngram = rerun.arms.get(method=Arm.Method.NGRAM)
    page.select_option("#id_arm", str(ngram.pk))
    page.fill("#id_max_concurrency", "4")
    page.fill(
        "#id_rationale",
        f"n-gram k=4 is faster at 1 and 4 in #{old.pk} (vLLM 0.32) and again in #{rerun.pk} (0.33.0). <b>ship</b>",
    )
    _shot(page, "6-propose")
    page.click("#decision-form [type=submit]")
    page.wait_for_selector("#evidence-table")
    decision = Decision.objects.get()
    assert decision.state == "proposed"
    assert page.locator("#approve").count() == 0  # alice wrote it: she cannot approve it
    assert "&lt;b&gt;ship&lt;/b&gt;" in page.inner_html(".rationale")
    assert page.locator("#evidence-table tbody tr").count() == 2
    _shot(page, "7-proposed")
    context.close()
    assert errors == []

    # bob sees it waiting for him, and approves it.
    context, page, errors = _open_as(browser, live_server, "bob")
    assert "Waiting for your approval" in page.inner_text("#notices")
    _shot(page, "8-bob-history")
    page.click(f"#awaiting >> text=#{decision.pk}")
    page.click("#approve")
    page.wait_for_selector("text=Final: it can no longer be edited")
    decision.refresh_from_db()
    assert (decision.state, decision.decided_by.username) == ("final", "bob")
    _shot(page, "9-approved")

    page.click("nav >> text=Decisions")
    current = page.inner_text("#service-chat .current")
    assert "Deploy n-gram k=4 up to concurrency 4" in current
    _shot(page, "10-decisions")

    page.goto(f"{live_server.url}/?decision=final")
    names = page.locator("#experiment-table tbody tr").all_inner_texts()
    assert len(names) == 2

    # bob leaves a comment on the re-run; its markup stays inert.
    page.goto(f"{live_server.url}/experiments/{rerun.pk}/")
    page.fill("#id_body", f"Approved as decision #{decision.pk}; see also #{old.pk}. <script>alert(1)</script>")
    page.click("#comments [type=submit]")
    page.wait_for_selector(".comment-body")
    assert "<script>alert(1)</script>" in page.inner_text(".comment-body")
    assert page.locator(f".comment-body a[href='/experiments/{old.pk}/']").count() == 1
    assert f"#{decision.pk}" in page.inner_text("#cited-by")
    page.locator("#comments").screenshot(path=ARTIFACTS / "review-11-comment.png")
    context.close()
    assert errors == []
