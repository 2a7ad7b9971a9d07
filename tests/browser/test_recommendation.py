"""The experiment page's "What to deploy" in real Chromium: the derived --speculative-config
is shown, and one click on "Propose this as a decision" opens the decision form filled in."""

import os

import pytest

from tests.browser.test_results import ARTIFACTS
from tests.factories import seed_finished_experiment
from tests.results.test_recommendation_page import _set_words

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_propose_opens_the_decision_form_filled_in_from_the_recommendation(logged_in_page, live_server, user):
    page = logged_in_page
    experiment = seed_finished_experiment(owner=user)
    cells = experiment.analysis.series["question"]["cells"]
    first, second = sorted({c["arm_id"] for c in cells})
    positions = {arm.id: arm.position for arm in experiment.arms.all()}
    a, b = positions[first], positions[second]
    _set_words(experiment, {(a, 1): ("faster", 1.31), (a, 4): ("slower", 0.9), (b, 1): ("slower", 0.8),
                            (b, 4): ("slower", 0.9)})  # fmt: skip

    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    section = page.locator("#recommendation")
    assert "num_speculative_tokens_per_batch_size" in section.locator("#recommendation-config").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    section.screenshot(path=ARTIFACTS / "recommendation.png")

    page.click("#recommendation-propose")
    page.wait_for_url("**/decisions/new/**")
    assert page.locator("input[name=kind][value=deploy]").is_checked()
    assert page.locator("select[name=arm]").input_value() == str(first)
    assert page.locator("input[name=max_concurrency]").input_value() == "1"
    assert f"#{experiment.pk}" in page.locator("textarea[name=rationale]").input_value()
    page.screenshot(path=ARTIFACTS / "recommendation-proposed.png", full_page=True)
