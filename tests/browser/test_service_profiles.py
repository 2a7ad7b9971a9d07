"""A service profile in real Chromium: made through the form from the navigation, its bands
per concurrency with the hours of its daily curve, and "Propose this as a decision" opening the
decision form filled in. Screenshots in test-artifacts/service-profile*.png."""

import os

import pytest
from django.conf import settings

from tests.browser.test_results import ARTIFACTS
from tests.factories import seed_finished_experiment
from tests.results.test_recommendation_page import _set_words

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shot(page, name):
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), f"{name} is too wide"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


def test_a_profile_made_in_the_form_shows_its_bands_and_proposes_a_decision(logged_in_page, live_server, user):
    page = logged_in_page
    experiment = seed_finished_experiment(owner=user)
    positions = {arm.position: arm for arm in experiment.arms.all()}
    _set_words(experiment, {(1, 1): ("faster", 1.4), (1, 4): ("faster", 1.2), (2, 1): ("slower", 0.9),
                            (2, 4): ("slower", 0.8)})  # fmt: skip

    page.goto(live_server.url)
    page.click("nav >> text=Service profiles")
    page.click("text=New service profile")
    page.fill("input[name=service]", "chat")
    page.fill("input[name=target_model]", str(settings.SPECDASH_MODELS_DIR / "target"))
    page.fill("input[name=worker_queue]", "cpu")
    page.fill("textarea[name=daily_concurrency]", "0-7: 1, 8-17: 16, 18-23: 4")
    page.fill("input[name=slo_tpot_ms]", "500")
    page.fill("input[name=category_mix]", "chat: 0.7, code_edit: 0.3")
    _shot(page, "service-profile-form")
    page.click("#service-profile-form button[type=submit]")

    page.wait_for_url("**/service-profiles/*/")
    rows = page.locator("#service-bands tbody tr")
    assert rows.evaluate_all("rows => rows.map(r => [r.dataset.word, r.cells[0].innerText, r.cells[3].innerText])") == [
        ["run arm", "1–4", "14"], ["not measured", "5–16", "10"],
    ]  # fmt: skip
    assert "Speculation pays for 14 of 24 hours" in page.locator("#paying-hours").inner_text()
    assert (
        "measured chat 100%; the service's mix is chat 70%, code_edit 30%" in page.locator("#mix-warnings").inner_text()
    )
    _shot(page, "service-profile")

    page.click("#service-propose")
    page.wait_for_url("**/decisions/new/**")
    assert page.locator("input[name=service]").input_value() == "chat"
    assert page.locator("input[name=kind][value=deploy]").is_checked()
    assert page.locator("select[name=arm]").input_value() == str(positions[1].pk)
    assert page.locator("input[name=max_concurrency]").input_value() == "4"
    assert page.locator(f"input[name=evidence][value='{experiment.pk}']").is_checked()
    assert (
        "service profile chat per concurrency band (1–4: run n-gram k=4"
        in page.locator("textarea[name=rationale]").input_value()
    )
    _shot(page, "service-profile-proposed")
