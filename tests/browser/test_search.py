"""A break-even search in real Chromium: the form takes a range instead of levels, and the
finished search's page states the bracket, shades it on the speedup chart, shows the
confirmed schedule and proposes deploying it."""

import os

import pytest

from experiments.models import Experiment
from tests.analysis.test_search import _finished, _run_search, _search
from tests.browser.test_results import ARTIFACTS

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_finished_search_shows_its_bracket_confirmation_and_proposal(logged_in_page, live_server, user):
    page = logged_in_page
    experiment, baseline, arm = _search(owner=user)
    _run_search(experiment, baseline, arm)
    experiment = _finished(experiment)

    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    search = page.locator("#question-search")
    assert "pays up to 8" in search.inner_text()
    assert "about 13.5 concurrent requests" in search.inner_text()
    assert search.locator(".search-levels tr[data-level='8'] td").nth(1).inner_text() == "2"  # from block 2
    assert "confirmed" in search.locator(".search-confirmation").inner_text()
    # The chart's sentence (static/js/experiment_results.js) reads the search's bracket.
    assert "between 8 and 16 concurrent requests" in page.locator("#break-even").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#question").screenshot(path=ARTIFACTS / "search-question.png")
    page.locator("#speedup").screenshot(path=ARTIFACTS / "search-speedup.png")
    page.locator("#recommendation").screenshot(path=ARTIFACTS / "search-recommendation.png")

    page.click("#recommendation-propose")
    page.wait_for_url("**/decisions/new/**")
    confirmation = experiment.arms.get(confirms=arm)
    assert page.locator("input[name=kind][value=deploy]").is_checked()
    assert page.locator("select[name=arm]").input_value() == str(confirmation.id)
    assert page.locator("input[name=max_concurrency]").input_value() == "16"


def test_the_form_submits_a_range_to_search(logged_in_page, live_server, celery_dispatch):
    page = logged_in_page
    page.goto(f"{live_server.url}/experiments/new/")
    page.fill("#id_name", "up to which concurrency")
    page.fill("#id_concurrency_levels", "")
    page.fill("#id_search_low", "1")
    page.fill("#id_search_high", "4")
    page.fill("#id_search_resolution", "2")
    page.locator("#search-range").screenshot(path=ARTIFACTS / "search-form.png")
    page.click("#experiment-form [type=submit]")
    page.wait_for_selector(".message.success")
    experiment = Experiment.objects.get(name="up to which concurrency")
    assert page.url == f"{live_server.url}/experiments/{experiment.pk}/"
    assert (experiment.search_low, experiment.search_high, experiment.concurrency_levels) == (1, 4, [1, 4])
