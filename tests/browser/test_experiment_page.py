"""The experiment page's frame in real Chromium: the answer and its reason on the first screen,
a navigator that stays at the top and jumps to each section, and nothing the browser fails to
load (no 404 in the console, the favicon included)."""

import os
from pathlib import Path

import pytest

from tests.factories import seed_calibration, seed_finished_experiment

# Playwright's sync API runs an event loop in this thread; the ORM calls here are plain.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SECTIONS = ["Acceptance", "Step timing", "Capacity", "Latency", "Verdict", "Runs"]

# The part of an element inside the window, as a fraction of the window's height.
IN_VIEW = """(selector) => {
  const box = document.querySelector(selector).getBoundingClientRect();
  return {top: box.top, bottom: box.bottom, height: window.innerHeight};
}"""


@pytest.fixture
def watched_page(logged_in_page):
    """The page with every console error and every failed response recorded."""
    problems = []
    logged_in_page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
    logged_in_page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    logged_in_page.problems = problems
    return logged_in_page


@pytest.fixture
def experiment_url(live_server):
    experiment = seed_calibration(seed_finished_experiment(slo_tpot_ms=20.0))
    return f"{live_server.url}/experiments/{experiment.pk}/"


def test_the_first_screen_holds_the_answer_and_its_reason(watched_page, experiment_url):
    page = watched_page
    page.goto(experiment_url)
    page.wait_for_load_state("networkidle")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "experiment-page-first-screen.png")

    answer = page.locator("#answer")
    box = page.evaluate(IN_VIEW, "#answer")
    assert box["bottom"] <= box["height"], box
    lines = answer.locator("#answer-lines > li")
    assert lines.count() == 2
    first = lines.nth(0).inner_text()
    # The seeded n-gram arm is faster at 1: the word, its figure and why it was called.
    assert "At concurrency 1: run n-gram k=4" in first
    assert "called faster after 3 blocks" in first
    assert "Engine-timed TPOT" in answer.inner_text()
    assert page.problems == []


def test_the_navigator_stays_on_screen_and_jumps_to_each_section(watched_page, experiment_url):
    page = watched_page
    page.goto(experiment_url)
    nav = page.locator("#section-nav")
    for name in SECTIONS:
        link = nav.get_by_role("link", name=name, exact=True)
        target = link.get_attribute("href")
        link.click()
        page.wait_for_function(
            "(selector) => Math.abs(document.querySelector(selector).getBoundingClientRect().top) < 120", arg=target
        )
        nav_box = nav.bounding_box()
        section = page.evaluate(IN_VIEW, target)
        # The bar is still at the top and does not cover the section's heading.
        assert nav_box is not None
        assert nav_box["y"] == pytest.approx(0, abs=1)
        assert section["top"] >= nav_box["height"] - 1, (name, section, nav_box)
    assert page.problems == []


def test_no_request_fails_and_the_favicon_loads(watched_page, experiment_url, live_server):
    page = watched_page
    page.goto(experiment_url)
    page.wait_for_load_state("networkidle")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    status = page.evaluate("(href) => fetch(href).then((r) => r.status)", icon)
    legacy = page.evaluate("() => fetch('/favicon.ico').then((r) => [r.status, r.redirected, r.url])")

    assert status == 200
    assert legacy == [200, True, f"{live_server.url}{icon}"]
    assert page.problems == []
