"""The variance components on the experiment page: the stored figures in the table, a definition
for each, the rounds the experiment ran, and nothing for an analysis stored before them."""

import pytest

from tests.factories import seed_finished_experiment
from tests.results.helpers import html_tables, page_html

pytestmark = pytest.mark.django_db

ROW = {
    "arm_id": 1, "arm": "n-gram k=4", "replicate": False, "metric": "server_tpot", "metric_name": "Engine-timed TPOT",
    "levels": 2, "blocks": 3, "sigma_start_pct": 2.1213203435596424, "sigma_run_pct": 2.1213203435596424,
    "c_start_s": 90.0, "c_run_s": 10.0, "start_sessions": 5, "rounds": 2, "rounds_exact": 2.1213203435596424,
    "note": "",
}  # fmt: skip
REPLICATE_ROW = ROW | {
    "arm": "replicate", "replicate": True, "sigma_start_pct": 0.0, "sigma_run_pct": 1.0, "rounds": 10,
    "rounds_exact": None, "note": "σ_start² is 0: only the cap limits the rounds",
}  # fmt: skip


@pytest.fixture
def finished(db):
    experiment = seed_finished_experiment()
    experiment.analysis.series["variance_components"] = {
        "rows": [ROW, REPLICATE_ROW], "rounds_in_experiment": 1, "max_rounds": 10,
    }  # fmt: skip
    experiment.analysis.save(update_fields=["series"])
    return experiment


def test_the_table_holds_the_stored_components_and_every_figure_is_defined(logged_in_client, finished):
    html = page_html(logged_in_client, finished)
    rows = html_tables(html)["table-variance-components"]
    assert rows[1] == [
        "n-gram k=4", "Engine-timed TPOT", "3", repr(ROW["sigma_start_pct"]), repr(ROW["sigma_run_pct"]), "90.0",
        "10.0", repr(ROW["rounds_exact"]), "2", "",
    ]  # fmt: skip
    assert rows[2][0] == "replicate (A/A)"
    assert rows[2][7:] == ["", "10", "σ_start² is 0: only the cap limits the rounds"]
    assert "Rounds per server: 1 in this experiment" in html
    assert "running several rounds per server session is not built" in html
    for term in ("Blocks", "σ<sub>start</sub>", "σ<sub>run</sub>", "c<sub>start</sub>", "c<sub>run</sub>", "r*"):
        assert f"<dt>{term}</dt>" in html
    assert "<dt>Rounds per server</dt>" in html
    assert "between 1 and 10" in html


def test_the_analysis_of_a_seeded_experiment_renders_without_recorded_times(logged_in_client):
    # The seeded runs record no start and finish times: the components stand, the rounds say why not.
    experiment = seed_finished_experiment()
    rows = html_tables(page_html(logged_in_client, experiment))["table-variance-components"][1:]
    assert {row[0] for row in rows} == {"n-gram k=4", "draft k=3"}
    assert all(row[-1].endswith("the start-up or run times were not recorded") for row in rows)


def test_an_analysis_stored_before_the_components_shows_no_section(logged_in_client, finished):
    del finished.analysis.series["variance_components"]
    finished.analysis.save(update_fields=["series"])
    assert 'id="variance-components"' not in page_html(logged_in_client, finished)


HOST_TEST = {
    "metric": "server_tpot", "metric_name": "Engine-timed TPOT", "level": 0.05, "min_blocks": 2, "min_hosts": 2,
    "hosts_seen": 2,
    "arms": [
        {
            "arm_id": 1, "arm": "n-gram k=4", "replicate": False, "f": 57.6, "df": [1, 3], "p": 0.0047,
            "p_holm": 0.0094, "warn": True, "farthest": "host-b", "note": "",
            "points": [{"block": 1, "host": "host-a", "ratio": 2.0}],
            "hosts": [
                {"host": "host-a", "blocks": 2, "mean_pct": 121.0}, {"host": "host-b", "blocks": 3, "mean_pct": 392.0},
            ],
        },
    ],
}  # fmt: skip


def test_the_between_host_term_and_the_host_test_are_shown_and_defined(logged_in_client, finished):
    series = finished.analysis.series["variance_components"]
    series["rows"] = [ROW | {"hosts": "host-a (2), host-b (3)", "sigma_host_pct": 55.9, "host_note": ""}]
    series |= {"min_host_blocks": 2, "min_hosts": 2, "host_test": HOST_TEST}
    finished.analysis.save(update_fields=["series"])
    html = page_html(logged_in_client, finished)
    tables = html_tables(html)
    assert tables["table-host-term"][1] == ["n-gram k=4", "Engine-timed TPOT", "host-a (2), host-b (3)", "55.9", ""]
    assert tables["table-host-test"][1] == [
        "n-gram k=4", "host-a: 121.0 (2); host-b: 392.0 (3)", "57.6", "1, 3", "0.0047", "0.0094",
        "yes: host-b farthest", "",
    ]  # fmt: skip
    assert "at least 2 hosts contributed at least 2 blocks each" in html
    for term in ("Hosts (blocks)", "σ<sub>host</sub>", "Mean by host", "F, df", "p", "p (Holm)"):
        assert f"<dt>{term}</dt>" in html
    assert 'id="chart-host-blocks"' in html
    assert "Colour: the host that ran the block" in html
    assert "host_blocks" in html  # the chart's series in results-data
