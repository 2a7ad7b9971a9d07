"""The pages work under their Content-Security-Policy in real Chromium: no script, style or
request is refused, and the charts are drawn."""

import os

import pytest

from tests.browser.login import log_in
from tests.factories import UserFactory, seed_finished_experiment

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
        log_in(page, live_server.url, user.username)
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


def test_the_copy_buttons_quote_text_a_spreadsheet_would_run(browser, live_server):
    user = UserFactory(username="copier")
    experiment = seed_finished_experiment(owner=user)
    arm = experiment.arms.get(position=2)
    arm.label = '=HYPERLINK("http://evil.example","x")'
    arm.save(update_fields=["label"])
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    try:
        log_in(page, live_server.url, user.username)
        page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
        page.click("button[data-copy=table-speedup]")
        copied = page.evaluate("navigator.clipboard.readText()")
    finally:
        context.close()

    cells = [cell for line in copied.splitlines() for cell in line.split("\t")]
    assert "'" + arm.label in cells
    assert arm.label not in cells
    assert any(cell.startswith("-") or cell.replace(".", "").isdigit() for cell in cells)
