"""The pages work under their Content-Security-Policy in real Chromium: no script, style or
request is refused, and the charts are drawn."""

import os

import pytest

from tests.factories import PASSWORD, UserFactory, seed_finished_experiment

# Playwright's sync API runs an event loop in this thread; the ORM calls here are plain.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every refusal the policy makes, seen from the page.
RECORD_VIOLATIONS = """() => {
  window.cspViolations = [];
  document.addEventListener("securitypolicyviolation", (e) =>
    window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`));
}"""


def test_the_pages_work_under_the_policy(browser, live_server):
    user = UserFactory(username="csp", is_staff=True, is_superuser=True)
    experiment = seed_finished_experiment(owner=user)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(f"({RECORD_VIOLATIONS})()")
    page = context.new_page()
    console = []
    page.on("console", lambda message: console.append(message.text))
    page.on("pageerror", lambda error: console.append(str(error)))
    try:
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", PASSWORD)
        page.click(".login [type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        for path in ("/", "/experiments/new/", f"/experiments/{experiment.pk}/", "/decisions/", "/admin/"):
            page.goto(f"{live_server.url}{path}")
            page.wait_for_load_state("networkidle")
            assert page.evaluate("window.cspViolations") == [], path
        page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
        page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('chart-tpot'))")
        assert page.evaluate("window.cspViolations") == []
    finally:
        context.close()
    assert not [text for text in console if "Content Security Policy" in text or "Error" in text], console
