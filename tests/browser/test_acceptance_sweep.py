"""The synthetic acceptance sweep's chart in real Chromium: one line per level through the
stored points, the break-even line at 1 and the arm's real τ marked."""

import os

import pytest

from experiments.analysis import acceptance_sweep
from tests.analysis.test_acceptance_sweep import _sweep_on
from tests.browser.test_results import ARTIFACTS
from tests.factories import seed_finished_experiment

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DRAWN = """(id) => {
  const chart = Chart.getChart(document.getElementById(id));
  const marks = chart.options.plugins.annotation.annotations;
  return {
    lines: chart.data.datasets.map((d) => [d.label, d.data.map((p) => [p.x, p.y])]),
    breakEven: [marks.breakEven.yMin, marks.breakEven.yMax],
    tau: marks.tau ? marks.tau.xMin : null,
  };
}"""


def test_the_sweep_chart_draws_each_level_the_break_even_line_and_the_real_tau(logged_in_page, live_server, user):
    page = logged_in_page
    experiment = seed_finished_experiment(requests=4, repetitions=2, owner=user)
    arm = _sweep_on(experiment, lengths=(1.5, 2.5, 3.5))
    (sweep,) = acceptance_sweep.acceptance_sweeps(experiment=experiment)

    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    canvas = f"sweep-chart-{arm.id}"
    page.wait_for_function(f"() => Chart.getChart(document.getElementById('{canvas}'))")
    drawn = page.evaluate(DRAWN, canvas)

    assert drawn["lines"] == [
        [f"{row.level} concurrent", [[p.length, pytest.approx(p.speedup)] for p in row.points]] for row in sweep.levels
    ]
    assert drawn["breakEven"] == [1, 1]
    assert drawn["tau"] == pytest.approx(sweep.tau)
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#acceptance-sweep").screenshot(path=ARTIFACTS / "acceptance-sweep.png")


def test_the_form_says_how_many_runs_and_servers_a_sweep_adds(logged_in_page, live_server):
    page = logged_in_page
    page.goto(f"{live_server.url}/experiments/new/")
    note = page.locator("[name='arms-0-synthetic_sweep'] >> xpath=ancestor::fieldset//*[@data-sweep-cost]")
    assert note.is_hidden()

    page.fill("#id_concurrency_levels", "1, 4")
    page.fill("#id_repetitions", "2")
    page.fill("[name='arms-0-synthetic_sweep']", "1.5, 2.5")
    # Two lengths at two levels in two blocks, a server per length and block.
    assert note.inner_text() == "This sweep adds 8 synthetic runs on 4 more vLLM server starts."

    page.uncheck("#id_server_per_block")
    assert note.inner_text() == "This sweep adds 8 synthetic runs on 2 more vLLM server starts."


def test_the_form_warns_that_a_sweep_on_a_cpu_only_queue_will_fail(logged_in_page, live_server, live_workers):
    """A worker with no GPU on `cpu`, one with a GPU on `h100`: the warning follows the queue
    typed and whether the arm has a sweep at all."""
    live_workers.return_value = (
        {"cpu@a": [{"name": "cpu"}], "gpu@b": [{"name": "h100"}]},
        {
            "cpu@a": {"host_name": "a", "cpu_model": "Test CPU", "gpu_name": "", "gpu_count": 0},
            "gpu@b": {"host_name": "b", "cpu_model": "Test CPU", "gpu_name": "NVIDIA H100", "gpu_count": 1},
        },
    )
    page = logged_in_page
    page.goto(f"{live_server.url}/experiments/new/")
    sweep = "[name='arms-0-synthetic_sweep']"
    warning = page.locator(f"{sweep} >> xpath=ancestor::fieldset//*[@data-sweep-cpu-only]")
    page.fill("#id_worker_queue", "cpu")
    assert warning.is_hidden()  # no sweep asked for

    page.fill(sweep, "1.5, 2.5")
    assert warning.inner_text() == (
        "Every live worker on queue cpu computes on CPU, and vLLM's CPU build refuses synthetic acceptance: "
        "this sweep's runs will fail without starting a server unless a GPU worker joins the queue. "
        "The arm's own runs are not affected."
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("[data-arm]").first.screenshot(path=ARTIFACTS / "sweep-on-cpu-queue.png")
    page.fill("#id_worker_queue", "h100")
    assert warning.is_hidden()
    page.fill("#id_worker_queue", "nowhere")  # no live worker: the queue's own note says so
    assert warning.is_hidden()
    page.fill("#id_worker_queue", "cpu")
    assert warning.is_visible()
    page.fill(sweep, "")
    assert warning.is_hidden()
