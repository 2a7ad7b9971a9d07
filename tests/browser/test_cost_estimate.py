"""The experiment form's device-minute estimate in real Chromium: it follows the levels, the
blocks and the arms as they are edited, before anything is submitted."""

import os
import re

import pytest
from playwright.sync_api import expect

from experiments.models import Experiment
from tests.browser.test_results import ARTIFACTS

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RANGE = re.compile(r"([\d.]+) to ([\d.]+) device-minutes: from 3 blocks, .* to all (\d+)")


def _shown(total) -> tuple[float, float, int]:
    """(least, most, maximum blocks) as the panel states them."""
    found = RANGE.search(total.inner_text())
    assert found, total.inner_text()
    return float(found[1]), float(found[2]), int(found[3])


def test_the_estimate_follows_the_levels_blocks_and_arms_as_they_are_edited(logged_in_page, live_server):
    page = logged_in_page
    page.goto(f"{live_server.url}/experiments/new/")
    total = page.locator("#estimate-total")
    expect(total).to_contain_text("device-minutes")
    least, most, blocks = _shown(total)
    assert 0 < least < most
    assert blocks == 10

    page.fill("#id_concurrency_levels", "1, 2, 4, 8")
    expect(page.locator("#estimate-sources")).to_contain_text(" at 2, ")
    more_levels = _shown(total)
    assert more_levels[0] > least
    assert more_levels[1] > most

    page.fill("#id_repetitions", "5")
    expect(total).to_contain_text("to all 5")
    fewer_blocks = _shown(total)
    assert fewer_blocks[0] == more_levels[0]  # the first look is the same 3 blocks
    assert fewer_blocks[1] < more_levels[1]

    page.click("#add-arm")  # a second n-gram arm: one more server in every block
    expect(total).not_to_contain_text(f"{fewer_blocks[1]:.1f} device-minutes")
    assert _shown(total)[1] > fewer_blocks[1]

    page.fill("#id_max_device_minutes", "1")
    expect(page.locator("#estimate-budget")).to_contain_text("already pass the budget of 1 device-minute:")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#cost-estimate").screenshot(path=ARTIFACTS / "cost-estimate.png")
    assert not Experiment.objects.exists()
