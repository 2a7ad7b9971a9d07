"""Files compared must share one protocol (experiments/imports/protocol.py): a cell, an arm and the
baseline at a level, and request rates; levels of different protocols are each shown."""

from html import unescape

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from experiments.models import Experiment, SpeedupEstimate
from tests.imports.helpers import (
    assert_refused,
    bench_file,
    bench_run,
    post_import,
    real_pairs,
)


@pytest.mark.django_db
def test_two_files_of_one_cell_with_different_protocols_are_refused_with_the_difference(logged_in_client):
    """The tester's case: two n-gram files at concurrency 4, 16 prompts of 64 tokens and 32 of 128."""
    pairs = [
        bench_file("baseline-c2.json", "base-c4.json", max_concurrency=4, **bench_run(16, 64)),
        bench_file(
            "ngram-k3-c2.json", "ngram-c4-a.json", max_concurrency=4, date="20261201-100000", **bench_run(16, 64)
        ),
        bench_file(
            "ngram-k3-c2.json", "ngram-c4-b.json", max_concurrency=4, date="20261201-110000", **bench_run(32, 128)
        ),
    ]

    response = post_import(logged_in_client, pairs)

    assert_refused(
        response,
        "ngram-c4-a.json and ngram-c4-b.json, both “ngram k=3” at concurrency 4, differ in protocol: "
        "num_prompts 16 and 32; output tokens a request (mean) 64.0 and 128.0.",
    )


@pytest.mark.django_db
def test_the_command_refuses_a_cell_of_two_protocols(user, tmp_path):
    for name, data in [
        bench_file("baseline-c2.json", "base.json", **bench_run(8, 24)),
        bench_file("ngram-k3-c2.json", "ngram-a.json", date="20261201-100000", **bench_run(8, 24)),
        bench_file(
            "ngram-k3-c2.json", "ngram-b.json", date="20261201-110000", **bench_run(8, 24, total_input_tokens=8 * 200)
        ),
    ]:
        (tmp_path / name).write_bytes(data)

    message = r"ngram-a.json and ngram-b.json.*input tokens a request \(mean\) 46.5 and 200.0"
    with pytest.raises(CommandError, match=message):
        call_command("import_bench", str(tmp_path), owner="alice", name="two protocols")

    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_an_arm_measured_otherwise_than_the_baseline_at_a_level_is_refused(logged_in_client):
    pairs = [
        bench_file("baseline-c2.json", "base-c4.json", max_concurrency=4, **bench_run(16, 64)),
        bench_file("ngram-k3-c2.json", "ngram-c4.json", max_concurrency=4, **bench_run(32, 64)),
    ]

    response = post_import(logged_in_client, pairs)

    assert_refused(
        response,
        "ngram-c4.json (“ngram k=3” at concurrency 4) was not measured as the baseline's base-c4.json was: "
        "num_prompts 32, the baseline's 16.",
    )


@pytest.mark.django_db
def test_files_at_different_request_rates_are_refused(logged_in_client):
    pairs = [
        bench_file("baseline-c1.json", "base-c1.json"),
        bench_file("ngram-k3-c1.json", "ngram-c1.json"),
        bench_file("baseline-c2.json", "base-c2.json", request_rate=2.0),
        bench_file("ngram-k3-c2.json", "ngram-c2.json", request_rate=2.0),
    ]

    response = post_import(logged_in_client, pairs)

    assert_refused(
        response,
        "different request rates (2.0: base-c2.json, ngram-c2.json; inf: base-c1.json, ngram-c1.json)",
        "An experiment has one request rate",
    )


@pytest.mark.django_db
def test_a_request_rate_the_files_share_is_the_experiments(logged_in_client):
    pairs = [bench_file(name, name, request_rate=4) for name in ("baseline-c1.json", "ngram-k3-c1.json")]

    assert post_import(logged_in_client, pairs).status_code == 302

    experiment = Experiment.objects.get()
    assert experiment.request_rate == 4.0
    assert SpeedupEstimate.objects.get(metric="output_throughput").outcome == "not applicable"


@pytest.mark.django_db
def test_outputs_that_differ_by_less_than_the_tolerance_are_one_protocol(logged_in_client):
    # 24 against 22 tokens a request: 8% apart, as outputs ending at EOS differ between runs.
    pairs = [
        bench_file("baseline-c1.json", "base.json", **bench_run(8, 24)),
        bench_file("ngram-k3-c1.json", "ngram.json", **bench_run(8, 22)),
    ]

    assert post_import(logged_in_client, pairs).status_code == 302


@pytest.mark.django_db
def test_levels_of_different_protocols_are_imported_and_each_level_shown(logged_in_client):
    pairs = [
        bench_file("baseline-c1.json", "base-c1.json", **bench_run(8, 24)),
        bench_file("ngram-k3-c1.json", "ngram-c1.json", **bench_run(8, 24)),
        bench_file("baseline-c2.json", "base-c2.json", **bench_run(16, 64)),
        bench_file("ngram-k3-c2.json", "ngram-c2.json", **bench_run(16, 64)),
    ]

    assert post_import(logged_in_client, pairs).status_code == 302

    experiment = Experiment.objects.get()
    files = {file["name"]: file for file in experiment.imported_files}
    assert (files["base-c1.json"]["prompts"], files["ngram-c2.json"]["prompts"]) == (8, 16)
    assert files["ngram-c2.json"]["output_tokens"] == 64.0
    assert files["base-c2.json"]["input_tokens"] == 46.5
    assert files["base-c2.json"]["request_rate"] == "inf"
    html = unescape(logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode())
    assert "8 at concurrency 1, 16 at concurrency 2 measured (the files' num_prompts)" in html
    assert "24.0 at concurrency 1, 64.0 at concurrency 2 tokens a request on average" in html
    assert "max_tokens not recorded" in html
    assert "16 measured" not in html
    assert "max_tokens 64" not in html


@pytest.mark.django_db
def test_one_protocol_for_every_level_is_shown_once(logged_in_client):
    post_import(logged_in_client, real_pairs())
    experiment = Experiment.objects.get()

    html = unescape(logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode())

    assert (experiment.num_prompts, experiment.max_tokens) == (8, 24)
    assert "8 measured (the files' num_prompts)" in html
    assert "24.0 tokens a request on average (output tokens / completed requests)" in html
    assert "input and output tokens a request</dt><dd>the file's total input (output) tokens" in html
