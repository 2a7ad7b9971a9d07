"""The downloads (experiments/results/exports.py): summaries and requests as CSV and JSON, each
experiment's own rows only, behind the login."""

import csv
import io
import json

import pytest
from django.urls import reverse

from experiments.models import Arm, RequestRecord, RunSummary
from tests.factories import (
    SEEDED_BLOCKS,
    RequestRecordFactory,
    seed_finished_experiment,
    seeded_output,
)
from tests.results.helpers import DOWNLOADS, download, two_arms

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", DOWNLOADS)
def test_downloads_need_a_login(client, name):
    url = reverse(f"experiments:{name}", args=[1])

    response = client.get(url)

    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_summaries_csv_has_one_row_per_run_with_every_summary_column(logged_in_client, finished):
    response, body = download(logged_in_client, finished, "summaries_csv")

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="experiment-{finished.pk}-summaries.csv"'
    rows = list(csv.DictReader(io.StringIO(body)))
    summary_columns = [f.name for f in RunSummary._meta.concrete_fields if f.name not in ("id", "run")]
    columns = ["run_id", "arm", "method", "concurrency", "repetition", "synthetic_acceptance_length", "run_status"]
    assert list(rows[0]) == [*columns, *summary_columns]
    assert len(rows) == RunSummary.objects.filter(run__experiment=finished).count() == 3 * 2 * SEEDED_BLOCKS
    first = RunSummary.objects.select_related("run__arm").get(run_id=rows[0]["run_id"])
    assert (rows[0]["arm"], rows[0]["concurrency"], rows[0]["repetition"]) == ("baseline", "1", "1")
    assert float(rows[0]["tpot_p50_ms"]) == first.tpot_p50_ms
    assert rows[0]["spec_accepted_per_pos"] == "[]"  # the baseline has none
    draft = next(row for row in rows if row["arm"] == "draft k=3")
    stored = RunSummary.objects.get(run_id=draft["run_id"])
    assert json.loads(draft["spec_accepted_per_pos"]) == stored.spec_accepted_per_pos


def test_summaries_json_matches_the_csv(logged_in_client, finished):
    _, csv_body = download(logged_in_client, finished, "summaries_csv")
    response, body = download(logged_in_client, finished, "summaries_json")

    assert response["Content-Type"] == "application/json"
    rows = json.loads(body)
    csv_rows = list(csv.DictReader(io.StringIO(csv_body)))
    assert [row["run_id"] for row in rows] == [int(row["run_id"]) for row in csv_rows]
    assert list(rows[0]) == list(csv_rows[0])
    assert rows[0]["goodput"] == RunSummary.objects.get(run_id=rows[0]["run_id"]).goodput


def test_requests_csv_streams_every_request_with_its_cell(logged_in_client, finished):
    response, body = download(logged_in_client, finished, "requests_csv")

    assert response.streaming
    assert response["Content-Disposition"] == f'attachment; filename="experiment-{finished.pk}-requests.csv"'
    rows = list(csv.DictReader(io.StringIO(body)))
    assert len(rows) == RequestRecord.objects.filter(run__experiment=finished).count() == 3 * 2 * SEEDED_BLOCKS * 20
    columns = ["run_id", "arm", "method", "concurrency", "repetition", "synthetic_acceptance_length", "prompt_index"]
    assert list(rows[0])[:7] == columns
    record = RequestRecord.objects.get(run_id=rows[-1]["run_id"], prompt_index=rows[-1]["prompt_index"])
    assert rows[-1]["arm"] == "draft k=3"
    assert float(rows[-1]["tpot_ms"]) == record.tpot_ms
    assert json.loads(rows[-1]["spec_accepted_per_step"]) == record.spec_accepted_per_step
    assert json.loads(rows[-1]["chunk_times_ms"]) == record.chunk_times_ms


def test_requests_json_streams_the_same_rows(logged_in_client, finished):
    response, body = download(logged_in_client, finished, "requests_json")

    assert response.streaming
    assert response["Content-Type"] == "application/json"
    rows = json.loads(body)
    assert len(rows) == 3 * 2 * SEEDED_BLOCKS * 20
    assert {row["arm"] for row in rows} == {"baseline", "n-gram k=4", "draft k=3"}
    assert rows[0]["spec_accepted_per_step"] is None
    assert rows[-1]["spec_proposed_per_step"][0] == 3
    # Output token ids are stored packed and downloaded as lists of ids.
    first = rows[0]
    assert first["output_token_ids"] == seeded_output(Arm(method="baseline"), first["prompt_index"], 32)


def test_downloads_of_an_experiment_without_rows_are_empty_but_well_formed(logged_in_client):
    experiment, _, _ = two_arms()

    assert json.loads(download(logged_in_client, experiment, "requests_json")[1]) == []
    assert download(logged_in_client, experiment, "summaries_csv")[1].startswith("run_id,arm,method,")


def test_downloads_of_a_missing_experiment_are_404(logged_in_client):
    RequestRecordFactory()

    assert logged_in_client.get(reverse("experiments:requests_csv", args=[999])).status_code == 404


@pytest.mark.parametrize("name", DOWNLOADS)
def test_downloads_hold_only_their_own_experiments_rows(logged_in_client, name):
    mine = seed_finished_experiment(requests=4, seed=1)
    other = seed_finished_experiment(requests=5, seed=2)
    _, body = download(logged_in_client, mine, name)
    if name.endswith("json"):
        run_ids = {row["run_id"] for row in json.loads(body)}
    else:
        run_ids = {int(row["run_id"]) for row in csv.DictReader(io.StringIO(body))}
    assert run_ids == set(mine.runs.values_list("id", flat=True))
    assert not run_ids & set(other.runs.values_list("id", flat=True))
