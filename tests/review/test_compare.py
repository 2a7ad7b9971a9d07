"""The comparison page: arms of two experiments side by side, each speedup over its own
baseline, the differences stated, absolute figures from different hosts labelled, and
refusals named."""

import json

import pytest
from django.urls import reverse

from experiments.models import EnvironmentSnapshot, SpeedupEstimate
from experiments.review import comparison
from tests.factories import seed_finished_experiment

pytestmark = pytest.mark.django_db

URL = reverse("experiments:compare")


@pytest.fixture
def pair():
    """The seeded protocol, then the same again on vLLM 0.33.0 on another host."""
    first = seed_finished_experiment(name="on 0.32", seed=1)
    rerun = seed_finished_experiment(name="on 0.33", seed=2)
    EnvironmentSnapshot.objects.filter(run__experiment=rerun).update(vllm_version="0.33.0", host_name="cpu-worker-2")
    return first, rerun


def test_two_experiments_side_by_side_with_their_differences(logged_in_client, pair):
    first, rerun = pair

    response = logged_in_client.get(URL, {"experiments": [first.pk, rerun.pk]})

    assert response.status_code == 200
    page = response.context["comparison"]
    assert [d.key for d in page.differences] == ["vllm_versions", "hosts"]
    assert [d.values for d in page.differences] == [("0.32.0", "0.33.0"), ("cpu-worker-1", "cpu-worker-2")]
    text = response.text
    assert "These experiments differ in 2 ways" in text
    assert 'data-difference="vllm_versions"' in text
    assert "Absolute figures from different hosts (cpu-worker-1, cpu-worker-2)" in text
    assert "Target model" in text.split("The same in all:")[1]


def test_each_arm_keeps_the_speedup_over_its_own_baseline(logged_in_client, pair):
    first, rerun = pair

    page = logged_in_client.get(URL, {"experiments": [first.pk, rerun.pk]}).context["comparison"]

    labels = [arm.style.label for arm in page.speedup_arms]
    assert labels == [
        f"#{first.pk} n-gram k=4",
        f"#{first.pk} draft k=3",
        f"#{rerun.pk} n-gram k=4",
        f"#{rerun.pk} draft k=3",
    ]
    metric, _, rows = page.speedup_tables[0]
    assert metric == "server_tpot"
    for level, estimates in rows:
        for arm, estimate in zip(page.speedup_arms, estimates, strict=True):
            stored = SpeedupEstimate.objects.get(arm=arm.arm, concurrency=level, metric="server_tpot")
            assert (estimate.point, estimate.ci_low, estimate.ci_high) == (stored.point, stored.ci_low, stored.ci_high)
    # The same configuration has one colour in both experiments, and each experiment its own dash.
    ngram_first, _, ngram_rerun, _ = page.speedup_arms
    assert ngram_first.style.colour == ngram_rerun.style.colour
    assert ngram_first.dash != ngram_rerun.dash


def test_baselines_appear_only_as_absolute_figures(logged_in_client, pair):
    first, rerun = pair

    response = logged_in_client.get(URL, {"experiments": [first.pk, rerun.pk]})

    page = response.context["comparison"]
    assert all(not arm.style.is_baseline for arm in page.speedup_arms)
    _, _, _, rows = page.absolute_tables[0]
    assert len(rows[0][1]) == len(page.arms) == 6
    data = json.loads(response.context["chart_data"] and json.dumps(response.context["chart_data"]))
    assert data["hosts_differ"] is True
    assert {a["label"] for a in data["arms"] if a["baseline"]} == {f"#{first.pk} baseline", f"#{rerun.pk} baseline"}


def test_picking_arms_narrows_the_page(logged_in_client, pair):
    first, rerun = pair
    ngram = [first.arms.get(label="n-gram k=4").pk, rerun.arms.get(label="n-gram k=4").pk]

    response = logged_in_client.get(URL, {"experiments": [first.pk, rerun.pk], "arms": ngram})

    page = response.context["comparison"]
    assert [arm.arm.pk for arm in page.arms] == ngram
    assert response.text.count('name="arms"') == 6  # the picker still offers every arm
    assert response.text.count('name="arms" value="') - response.text.count(" checked>") == 4


def test_like_with_like_says_so(logged_in_client):
    first = seed_finished_experiment(name="a", seed=1)
    second = seed_finished_experiment(name="b", seed=2)

    response = logged_in_client.get(URL, {"experiments": [first.pk, second.pk]})

    assert response.context["comparison"].differences == []
    assert 'id="like-with-like"' in response.text
    assert "host-warning" not in response.text


def test_an_experiment_added_by_number_joins(logged_in_client, pair):
    first, rerun = pair
    third = seed_finished_experiment(name="third", seed=3, output_tokens=48)

    response = logged_in_client.get(URL, {"experiments": [first.pk, rerun.pk, f"#{third.pk}", ""]})

    page = response.context["comparison"]
    assert [e.pk for e in page.experiments] == [first.pk, rerun.pk, third.pk]
    assert "max_tokens" in [d.key for d in page.differences]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "Pick 2 to 6 experiments to compare (got 0)."),
        ({"experiments": ["{first}"]}, "Pick 2 to 6 experiments to compare (got 1)."),
        ({"experiments": ["{first}", "999999"]}, "There is no experiment #999999."),
        ({"experiments": ["{first}", "x"]}, "“x” is not an experiment or arm number."),
        (
            {"experiments": ["{first}", "{rerun}"], "arms": ["999999"]},
            "Arm 999999 belongs to none of these experiments.",
        ),
    ],
)
def test_a_bad_pick_is_named(logged_in_client, pair, params, message):
    first, rerun = pair
    params = {key: [v.format(first=first.pk, rerun=rerun.pk) for v in values] for key, values in params.items()}

    response = logged_in_client.get(URL, params)

    assert response.status_code == 400
    assert message in response.text.replace("&ldquo;", "“").replace("&rdquo;", "”")
    assert "comparison" not in response.context


def test_protocol_reads_what_the_runs_recorded(pair):
    first, _ = pair
    snapshots = list(EnvironmentSnapshot.objects.filter(run__experiment=first).values(*comparison.ENVIRONMENT_FIELDS))

    protocol = comparison.protocol_of(first, snapshots)

    assert protocol.vllm_versions == ("0.32.0",)
    assert protocol.hardware == ("CPU: AMD EPYC 7B13",)
    assert protocol.runtime == ("torch 2.13.0+cpu · Python 3.11.2",)
    assert protocol.workload == "prompt set chat"
    assert protocol.label == f"#{first.pk} on 0.32"
