"""The results of a finished experiment in real Chromium: every chart is drawn with data,
the controls redraw them, the tables sort and copy, and the verdicts are on the page."""

import os
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from experiments.models import RequestRecord, RunSummary, SpeedupEstimate
from tests.factories import seed_calibration, seed_finished_experiment

# Playwright's sync API runs an event loop in this thread; the ORM calls here are plain.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

CANVASES = [
    "chart-ttft", "chart-tpot", "chart-server_tpot", "chart-e2e", "chart-output-throughput",
    "chart-request-throughput", "chart-goodput",
    "chart-speedup", "chart-acceptance-unconditional", "chart-acceptance-conditional", "chart-along-output",
    "chart-tpot-cdf", "chart-tau-cdf", "chart-itl", "chart-tokens-per-chunk", "chart-capacity", "chart-predicted",
]  # fmt: skip

# For each canvas: its chart's number of datasets and of data points in the first one.
CHART_SIZES = """(ids) => Object.fromEntries(ids.map((id) => {
  const chart = Chart.getChart(document.getElementById(id));
  return [id, chart ? [chart.data.datasets.length, chart.data.datasets[0]?.data.length ?? 0] : null];
}))"""


@pytest.fixture
def page(logged_in_page):
    return logged_in_page


def _shot(page, name):
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


def _title(page, canvas_id):
    return page.evaluate(f"Chart.getChart(document.getElementById('{canvas_id}')).options.plugins.title.text")


def _drawn(page, canvas_id) -> dict[str, list[list]]:
    """{dataset label: its [x, y] points} of the chart drawn on the canvas now."""
    datasets = page.evaluate(
        f"Chart.getChart(document.getElementById('{canvas_id}')).data.datasets"
        ".map(d => [d.label, d.data.map(p => [p.x, p.y])])"
    )
    return dict(datasets)


def _stored_means(experiment, column) -> dict[str, list[float]]:
    """{arm label: the mean of a summary column over the blocks, at each level in order}."""
    values = defaultdict(lambda: defaultdict(list))
    summaries = RunSummary.objects.filter(run__experiment=experiment, run__arm__is_calibration=False)
    for s in summaries.select_related("run__arm"):
        values[s.run.arm.label][s.run.concurrency].append(getattr(s, column))
    return {label: [statistics.fmean(v) for _, v in sorted(by_level.items())] for label, by_level in values.items()}


def _check_cdf(drawn, stored: dict[str, list[float]]) -> None:
    """Each arm's curve runs from its smallest stored value through the median to the largest,
    at 0, 2, … 100 % of the requests."""
    assert drawn.keys() == stored.keys()
    for label, points in drawn.items():
        xs, values = [x for x, _ in points], stored[label]
        assert (xs[0], xs[25], xs[-1]) == pytest.approx((min(values), statistics.median(values), max(values)))
        assert [y for _, y in points] == pytest.approx([2 * i for i in range(51)])


def _stored_per_request(experiment, level, column) -> dict[str, list[float]]:
    """{arm label: a request column's values at the level}, for the arms that have any."""
    rows = RequestRecord.objects.filter(run__experiment=experiment, run__concurrency=level)
    rows = rows.exclude(run__arm__is_calibration=True)  # the page does not show the calibration arm
    values = defaultdict(list)
    for label, value in rows.exclude(**{column: None}).values_list("run__arm__label", column):
        values[label].append(value)
    return dict(values)


def test_every_chart_is_drawn_with_data_and_the_verdicts_are_shown(page, live_server):
    experiment = seed_calibration(seed_finished_experiment(slo_tpot_ms=20.0, temperature=0.7))
    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('chart-predicted'))")

    assert page.locator("canvas").count() == len(CANVASES)
    sizes = page.evaluate(CHART_SIZES, CANVASES)
    assert {canvas: size for canvas, size in sizes.items() if not size or 0 in size} == {}
    # One line per arm over the levels; speculative arms only where acceptance is concerned.
    assert sizes["chart-tpot"] == [3, 2]
    assert sizes["chart-server_tpot"] == [3, 2]
    assert sizes["chart-speedup"] == [2, 2]
    assert sizes["chart-acceptance-unconditional"] == [2, 4]
    assert sizes["chart-tpot-cdf"] == [3, 51]
    # The draft arm's measurement and prediction; the n-gram arm has no draft cost, so no prediction.
    assert sizes["chart-predicted"] == [2, 2]

    verdicts = page.inner_text("#verdicts")
    assert "n-gram k=4 is faster than the baseline" in verdicts
    assert "draft k=3" in verdicts
    assert "slower than the baseline" in verdicts
    assert "Sampling at temperature 0.7" in page.inner_text("#warnings")
    assert page.locator("#table-cdf tbody tr").count() == 51
    # The widest table fits the page without a horizontal scroll bar.
    latency = page.locator("#table-latency")
    assert latency.evaluate("table => table.scrollWidth <= table.parentElement.clientWidth")
    _shot(page, "results-01-page")


def test_controls_redraw_and_tables_sort_and_copy(page, live_server):
    experiment = seed_calibration(seed_finished_experiment())
    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    page.wait_for_function("() => window.Chart && Chart.getChart(document.getElementById('chart-predicted'))")

    page.click("[data-toggle=latency] button[data-value=p99]")
    assert _title(page, "chart-tpot") == "TPOT, p99"
    # Each latency chart now draws the stored p99s, a point per level: their mean over the blocks.
    for metric in ("ttft", "tpot", "server_tpot", "e2e"):
        drawn, stored = _drawn(page, f"chart-{metric}"), _stored_means(experiment, f"{metric}_p99_ms")
        assert drawn.keys() == stored.keys()
        for label, points in drawn.items():
            assert [x for x, _ in points] == ["1", "4"]
            assert [y for _, y in points] == pytest.approx(stored[label])
    page.click("[data-toggle=speedup] button[data-value=output_throughput]")
    assert "output throughput" in _title(page, "chart-speedup")
    # The chart now draws the stored throughput speedups, not the TPOT ones.
    drawn = _drawn(page, "chart-speedup")
    stored = SpeedupEstimate.objects.filter(experiment=experiment, metric="output_throughput")
    assert sorted(y for points in drawn.values() for _, y in points) == pytest.approx(sorted(s.point for s in stored))
    # The verdict grid shows one metric at a time, the engine-timed TPOT first.
    assert page.locator("#grid-server_tpot").is_visible()
    assert not page.locator("#grid-tpot").is_visible()
    page.click("[data-toggle=grid] button[data-value=e2e]")
    assert page.locator("#grid-e2e").is_visible()
    assert not page.locator("#grid-server_tpot").is_visible()
    assert "Break-even for output throughput" in page.inner_text("#break-even")
    page.click("[data-toggle=cdf] button[data-value='4']")
    assert _title(page, "chart-tpot-cdf") == "Per-request TPOT at 4"
    # Both CDFs now draw the requests measured at 4.
    _check_cdf(_drawn(page, "chart-tpot-cdf"), _stored_per_request(experiment, 4, "tpot_ms"))
    _check_cdf(_drawn(page, "chart-tau-cdf"), _stored_per_request(experiment, 4, "spec_acceptance_length"))

    # Sorting the speedup table by its engine-timed TPOT column, descending, puts the largest speedup first.
    header = page.locator("#table-speedup thead th", has_text="Engine-timed TPOT")
    header.click()
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    best = SpeedupEstimate.objects.filter(experiment=experiment, metric="server_tpot").order_by("-point").first()
    first_row = page.locator("#table-speedup tbody tr").first
    assert float(first_row.locator("td").nth(3).get_attribute("data-value")) == best.point

    page.click("button[data-copy=table-speedup]")
    copied = page.evaluate("navigator.clipboard.readText()")
    lines = copied.strip().split("\n")
    assert lines[0].split("\t")[:6] == [
        "Arm", "Concurrency", "Blocks", "Engine-timed TPOT speedup", "Engine-timed TPOT 95% low",
        "Engine-timed TPOT 95% high",
    ]  # fmt: skip
    assert len(lines) == 1 + 2 * 2
    assert repr(best.point) in lines[1]
    _shot(page, "results-02-after-controls")
