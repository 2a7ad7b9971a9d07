"""The block ratios coloured by host in real Chromium (issue 38): one dataset per arm and host,
a colour per host whatever the arm, a shape per arm, the points as stored."""

import os

import pytest

from tests.factories import seed_finished_experiment

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _row(arm, replicate, points):
    return {
        "arm_id": 0, "arm": arm, "replicate": replicate, "hosts": [], "f": None, "df": [0, 0], "p": None,
        "p_holm": None, "warn": False, "farthest": "", "note": "",
        "points": [{"block": block, "host": host, "ratio": ratio} for block, host, ratio in points],
    }  # fmt: skip


def test_the_block_ratios_are_coloured_by_host(logged_in_page, live_server):
    experiment = seed_finished_experiment()
    series = experiment.analysis.series["variance_components"]
    series["host_test"] = {
        "metric": "server_tpot", "metric_name": "Engine-timed TPOT", "level": 0.05, "min_blocks": 2,
        "min_hosts": 2, "hosts_seen": 2,
        "arms": [
            _row("n-gram k=4", False, [(1, "host-a", 1.4), (2, "host-b", 1.9), (3, "host-a", 1.5)]),
            _row("replicate", True, [(1, "host-a", 1.0), (2, "host-b", 1.01), (3, "host-a", 0.99)]),
        ],
    }  # fmt: skip
    experiment.analysis.save(update_fields=["series"])
    page = logged_in_page
    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('chart-host-blocks'))")
    datasets = page.evaluate(
        "Chart.getChart(document.getElementById('chart-host-blocks')).data.datasets"
        ".map(d => [d.label, d.backgroundColor, d.pointStyle, d.data.map(p => [p.x, p.y])])"
    )
    by_label = {label: (colour, shape, points) for label, colour, shape, points in datasets}
    assert by_label.keys() == {
        "n-gram k=4 on host-a", "n-gram k=4 on host-b", "replicate (A/A) on host-a", "replicate (A/A) on host-b",
    }  # fmt: skip
    assert by_label["n-gram k=4 on host-a"][2] == [[1, 1.4], [3, 1.5]]
    assert by_label["n-gram k=4 on host-a"][0] == by_label["replicate (A/A) on host-a"][0]
    assert by_label["n-gram k=4 on host-a"][0] != by_label["n-gram k=4 on host-b"][0]
    assert by_label["n-gram k=4 on host-a"][1] != by_label["replicate (A/A) on host-a"][1]
