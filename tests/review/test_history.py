"""The history page: filters in the URL that combine, refusals named, sorting, pages, the
headline of each experiment in the verdict words, and a query count that does not grow
with the page."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from experiments import lifecycle
from experiments.measurement.stats.differences import hardware_label
from experiments.models import Arm, Experiment, SpeedupEstimate
from experiments.review import history
from tests.factories import (
    ArmFactory,
    EnvironmentSnapshotFactory,
    ExperimentFactory,
    RunFactory,
    SpeedupEstimateFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

URL = reverse("experiments:list")


def _experiment(*, arms=(("n-gram k=4", Arm.Method.NGRAM),), days_ago=0, **fields) -> Experiment:
    experiment = ExperimentFactory(**fields)
    ArmFactory(experiment=experiment, baseline=True, position=0)
    for position, (label, method) in enumerate(arms, start=1):
        ArmFactory(experiment=experiment, position=position, label=label, method=method)
    if days_ago:
        Experiment.objects.filter(pk=experiment.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    return experiment


def _text(html: str) -> str:
    """The page's words without markup, spaces collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def _names(client, **params) -> list[str]:
    response = client.get(URL, params)
    assert response.status_code == 200, response.context["filters"].errors
    return [row.experiment.name for row in response.context["rows"]]


def test_lists_newest_first_with_arms_owner_and_runtime(logged_in_client):
    _experiment(name="older one", days_ago=1)
    _experiment(name="newer one", owner=UserFactory(username="carol"), vllm_versions=["0.33.1"], hardware=["1 × H100"])

    response = logged_in_client.get(URL)

    text = response.text
    assert text.index("newer one") < text.index("older one")
    assert "n-gram k=4" in text
    assert "carol" in text
    assert "vLLM 0.33.1 · 1 × H100" in text
    assert "2 experiments." in text


def test_each_filter_narrows_the_list(logged_in_client, user):
    carol = UserFactory(username="carol")
    _experiment(name="mine queued", owner=user)
    _experiment(name="llama finished", status=Experiment.Status.FINISHED, target_model="/m/llama", owner=carol)
    _experiment(name="draft on h100", worker_queue="h100", arms=[("draft k=3", Arm.Method.DRAFT_MODEL)])
    _experiment(name="on 0.33", vllm_versions=["0.33.0"], hardware=["1 × NVIDIA H100"])
    _experiment(name="last month", days_ago=35)

    assert _names(logged_in_client, status="finished") == ["llama finished"]
    assert _names(logged_in_client, owner="mine") == ["mine queued"]
    assert _names(logged_in_client, owner="carol") == ["llama finished"]
    assert _names(logged_in_client, q="LLAMA") == ["llama finished"]
    assert _names(logged_in_client, model="/m/llama") == ["llama finished"]
    assert _names(logged_in_client, method="draft_model") == ["draft on h100"]
    assert _names(logged_in_client, queue="h100") == ["draft on h100"]
    assert _names(logged_in_client, vllm="0.33.0") == ["on 0.33"]
    assert _names(logged_in_client, hardware="1 × NVIDIA H100") == ["on 0.33"]
    month_ago = (timezone.now() - timedelta(days=35)).date()
    assert _names(logged_in_client, since=month_ago, until=month_ago) == ["last month"]
    assert "last month" not in _names(logged_in_client, since=month_ago + timedelta(days=1))


def test_filters_combine(logged_in_client, user):
    _experiment(name="mine finished ngram", owner=user, status=Experiment.Status.FINISHED)
    _experiment(name="mine failed ngram", owner=user, status=Experiment.Status.FAILED)
    _experiment(name="theirs finished ngram", status=Experiment.Status.FINISHED)
    _experiment(
        name="mine finished draft",
        owner=user,
        status=Experiment.Status.FINISHED,
        arms=[("draft", Arm.Method.DRAFT_MODEL)],
    )

    assert _names(logged_in_client, owner="mine", status="finished", method="ngram") == ["mine finished ngram"]
    assert _names(logged_in_client, owner="mine", status="failed", method="draft_model") == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "bogus"}, "“bogus” is not a status."),
        ({"method": "magic"}, "“magic” is not a speculative method."),
        ({"model": "/no/such"}, "No experiment used the model “/no/such”."),
        ({"owner": "nobody"}, "There is no user “nobody”."),
        ({"queue": "tpu"}, "No experiment ran on the queue “tpu”."),
        ({"vllm": "9.9"}, "No run recorded vLLM “9.9”."),
        ({"since": "2025-13-01"}, "Enter a valid date."),
        ({"since": "2025-06-02", "until": "2025-06-01"}, "The range ends (2025-06-01) before it starts (2025-06-02)."),
        ({"sort": "random"}, "“random” is no order."),
        ({"per_page": "7"}, "Show 20, 50, 100 per page (got “7”)."),
        ({"page": "99"}, "There is no page 99: the list has 1 page."),
        ({"page": "abc"}, "Enter a whole number."),
    ],
)
def test_an_invalid_filter_is_reported_and_nothing_is_listed(logged_in_client, params, message):
    _experiment(name="listed otherwise")

    response = logged_in_client.get(URL, params)

    assert response.status_code == 400
    assert message in response.context["filters"].errors.as_text().replace("&quot;", '"')
    assert 'id="filter-errors"' in response.text
    assert "listed otherwise" not in response.text


def test_filters_stay_in_the_page_links(logged_in_client):
    for _ in range(25):
        _experiment(status=Experiment.Status.FINISHED)

    first = logged_in_client.get(URL, {"status": "finished", "sort": "name"})
    second = logged_in_client.get(URL, {"status": "finished", "sort": "name", "page": 2})

    assert len(first.context["rows"]) == 20
    assert len(second.context["rows"]) == 5
    assert "?status=finished&amp;sort=name&amp;page=2" in first.text
    assert len(logged_in_client.get(URL, {"per_page": 50}).context["rows"]) == 25


def test_sorts(logged_in_client):
    _experiment(name="b", owner=UserFactory(username="zed"), days_ago=2, status=Experiment.Status.RUNNING)
    _experiment(name="c", owner=UserFactory(username="amy"), days_ago=1, status=Experiment.Status.FAILED)
    _experiment(name="a", owner=UserFactory(username="max"), status=Experiment.Status.FINISHED)

    assert _names(logged_in_client) == ["a", "c", "b"]
    assert _names(logged_in_client, sort="oldest") == ["b", "c", "a"]
    assert _names(logged_in_client, sort="name") == ["a", "b", "c"]
    assert _names(logged_in_client, sort="owner") == ["c", "a", "b"]
    assert _names(logged_in_client, sort="status") == ["c", "a", "b"]


# ---------------------------------------------------------------- headline


def _estimate(arm_id, level, point, outcome, lo=None, hi=None, primary=True):
    return SpeedupEstimate(
        arm_id=arm_id, concurrency=level, point=point, ci_low=lo, ci_high=hi, outcome=outcome, primary=primary
    )


def test_headline_picks_the_arm_called_faster_at_most_levels_then_the_larger_speedup():
    arms = [
        Arm(id=1, method=Arm.Method.BASELINE, label="baseline"),
        Arm(id=2, method=Arm.Method.BASELINE, is_replicate=True, label="A/A"),
        Arm(id=3, method=Arm.Method.NGRAM, label="big but unsure"),
        Arm(id=4, method=Arm.Method.EAGLE3, label="steady"),
    ]
    estimates = [
        _estimate(2, 1, 2.0, "faster", 1.9, 2.1),  # the replicate is never the best arm
        _estimate(3, 1, 1.9, "inconclusive", 0.8, 3.0),
        _estimate(3, 8, 1.5, "inconclusive", 0.7, 2.5),
        _estimate(4, 1, 1.3, "faster", 1.2, 1.4),
        _estimate(4, 8, 0.99, "equivalent", 0.985, 1.005),
    ]

    headline = history.headline(arms=arms, levels=[8, 1, 32], estimates=estimates)

    assert headline.arm_label == "steady"
    assert [(c.level, c.outcome, c.figure) for c in headline.cells] == [
        (1, "faster", "1.30× [1.20, 1.40]"),
        (8, "equivalent", "0.990× [0.985, 1.005]"),
        (32, "no data", "–"),
    ]


def test_headline_counts_only_the_questions_words():
    # On a metric outside the question, "faster" is unadjusted: it does not pick the arm.
    arms = [Arm(id=3, method=Arm.Method.NGRAM, label="called"), Arm(id=4, method=Arm.Method.NGRAM, label="larger")]
    estimates = [
        _estimate(3, 1, 1.1, "faster", 1.05, 1.15, primary=False),
        _estimate(4, 1, 1.3, "inconclusive", 0.9, 1.9, primary=False),
    ]
    assert history.headline(arms=arms, levels=[1], estimates=estimates).arm_label == "larger"
    primary = [_estimate(3, 1, 1.1, "faster", 1.05, 1.15), _estimate(4, 1, 1.3, "inconclusive", 0.9, 1.9)]
    assert history.headline(arms=arms, levels=[1], estimates=primary).arm_label == "called"


def test_headline_breaks_a_tie_in_calls_by_the_geometric_mean():
    arms = [Arm(id=3, method=Arm.Method.NGRAM, label="a"), Arm(id=4, method=Arm.Method.NGRAM, label="b")]
    estimates = [
        _estimate(3, 1, 1.1, "too few blocks"),
        _estimate(4, 1, 1.2, "too few blocks"),
        _estimate(3, 4, 1.1, "too few blocks"),
        _estimate(4, 4, 1.05, "too few blocks"),
    ]

    assert history.headline(arms=arms, levels=[1, 4], estimates=estimates).arm_label == "b"
    assert history.headline(arms=arms, levels=[1], estimates=[]) is None


def test_the_page_shows_each_headline_in_verdict_words(logged_in_client):
    experiment = _experiment(name="with verdicts", status=Experiment.Status.FINISHED, concurrency_levels=[1, 4])
    arm = experiment.arms.get(position=1)
    engine = SpeedupEstimate.Metric.SERVER_TPOT  # the headline's first metric, as the grid's
    SpeedupEstimateFactory(
        arm=arm, concurrency=1, metric=engine, point=1.42, ci_low=1.3, ci_high=1.55, outcome="faster"
    )
    SpeedupEstimateFactory(arm=arm, concurrency=4, metric=engine, point=0.8, ci_low=0.7, ci_high=0.9, outcome="slower")
    SpeedupEstimateFactory(
        arm=arm,
        concurrency=4,
        metric=SpeedupEstimate.Metric.E2E,
        point=1.0,
        ci_low=0.99,
        ci_high=1.01,
        outcome="equivalent",
    )
    _experiment(name="queued one")

    text = _text(logged_in_client.get(URL).text)

    assert "Best arm · Engine-timed TPOT speedup" in text
    assert "n-gram k=4 at 1 ▲ faster 1.42× [1.30, 1.55] at 4 ▼ slower 0.80× [0.70, 0.90]" in text
    assert "verdicts when it finishes" in text
    e2e = _text(logged_in_client.get(URL, {"metric": "e2e"}).text)
    assert "Best arm · End-to-end latency speedup" in e2e
    assert "at 1 no data – at 4 = equivalent 1.00× [0.99, 1.01]" in e2e


def _populate(n: int) -> None:
    for i in range(n):
        experiment = _experiment(name=f"e{i}", status=Experiment.Status.FINISHED)
        arm = experiment.arms.get(position=1)
        RunFactory(arm=arm, concurrency=1)
        SpeedupEstimateFactory(arm=arm, concurrency=1)
        SpeedupEstimateFactory(arm=arm, concurrency=4)


def test_the_query_count_does_not_grow_with_the_page(logged_in_client):
    def queries(**params) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert logged_in_client.get(URL, params).status_code == 200
        return len(captured)

    logged_in_client.get(URL)  # the first view of all records the visit
    _populate(3)
    few = queries()
    _populate(60)

    assert queries() == few
    assert queries(per_page=100) == few
    assert queries(per_page=50, page=2, method="ngram", status="finished") == few


# ---------------------------------------------------------------- what the runs recorded


def test_finishing_copies_the_recorded_vllm_versions_and_hardware_onto_the_experiment():
    experiment = _experiment(status=Experiment.Status.RUNNING)
    baseline, arm = experiment.arms.all()
    gpu = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
    for run_arm, version in ((baseline, "0.33.0"), (arm, "0.32.0")):
        run = RunFactory(arm=run_arm, status="succeeded")
        EnvironmentSnapshotFactory(run=run, vllm_version=version, **gpu)
    EnvironmentSnapshotFactory(run=RunFactory(arm=arm, status="succeeded"), vllm_version="0.33.0", **gpu)

    lifecycle.experiment_finish(experiment=experiment)

    experiment.refresh_from_db()
    assert experiment.vllm_versions == ["0.32.0", "0.33.0"]
    assert experiment.hardware == ["1 × NVIDIA H100 80GB HBM3"]


def test_a_cpu_run_is_listed_by_its_cpu():
    assert hardware_label(gpu_name="", gpu_count=0, cpu_model="AMD EPYC 7B13") == "CPU: AMD EPYC 7B13"
