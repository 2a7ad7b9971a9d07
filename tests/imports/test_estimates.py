"""Point estimates from the files' means (experiments/imports/estimates.py) where the files hold no
per-request rows."""

from html import unescape

import pytest
from django.urls import reverse

from experiments.models import Experiment, ExperimentAnalysis, SpeedupEstimate
from tests.imports.helpers import (
    FIXTURES,
    bench_file,
    post_import,
    real_file,
)


def _latencies(ttft: float, tpot: float, e2e: float) -> dict:
    return {"mean_ttft_ms": ttft, "mean_tpot_ms": tpot, "mean_e2el_ms": e2e}


@pytest.mark.django_db
def test_summary_only_files_get_point_estimates_from_their_means(logged_in_client):
    """Two blocks at concurrency 2. Baseline means (TTFT, TPOT, E2E): 40, 12, 300 and 40, 10, 300;
    the arm's: 50, 8, 250 twice. TPOT ratios 12/8 = 1.5 and 10/8 = 1.25, geometric mean
    √1.875 = 1.369306…; E2E 300/250 = 1.2 in both; TTFT 40/50 = 0.8 in both."""
    first, second = {"date": "20261201-100000"}, {"date": "20261201-110000"}
    pairs = [
        bench_file("baseline-c2.json", "base-1.json", **first, **_latencies(40, 12, 300)),
        bench_file("baseline-c2.json", "base-2.json", **second, **_latencies(40, 10, 300)),
        bench_file("ngram-k3-c2.json", "ngram-1.json", **first, **_latencies(50, 8, 250)),
        bench_file("ngram-k3-c2.json", "ngram-2.json", **second, **_latencies(50, 8, 250)),
    ]

    assert post_import(logged_in_client, pairs).status_code == 302

    estimates = {e.metric: e for e in SpeedupEstimate.objects.filter(concurrency=2)}
    tpot = estimates["tpot"]
    assert tpot.point == pytest.approx(1.3693063937629153)
    assert tpot.block_ratios == pytest.approx([1.5, 1.25])
    assert (tpot.ci_low, tpot.ci_high, tpot.n_repetitions) == (None, None, 2)
    assert (tpot.outcome, tpot.note) == ("point estimate", "point estimate from the files' means, no interval")
    assert estimates["e2e"].point == pytest.approx(1.2)
    assert estimates["ttft"].point == pytest.approx(0.8)
    assert estimates["server_tpot"].point is None  # the files hold no engine timing
    assert estimates["output_throughput"].ci_low is not None  # throughput keeps its interval over the blocks


@pytest.mark.django_db
def test_the_page_shows_the_point_estimates_with_their_definition(logged_in_client):
    pairs = [
        bench_file("baseline-c2.json", "base.json", **_latencies(40, 12, 300)),
        bench_file("ngram-k3-c2.json", "ngram.json", **_latencies(50, 8, 250)),
    ]
    post_import(logged_in_client, pairs)
    experiment = Experiment.objects.get()

    html = unescape(logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode())

    assert 'id="point-estimates"' in html
    assert "Latency speedups from the files' means" in html
    assert "the baseline's mean TTFT, TPOT or E2E as its file reports it" in html
    assert "<dt>No interval, no verdict</dt>" in html
    assert "<dt>Point estimate</dt><dd>a TPOT or E2E figure" in html  # in the speedup section's definitions
    table = html[html.index('id="table-point-estimates"') :]
    assert '1.500×<span class="range">point estimate from the files\' means, no interval</span>' in table
    assert 'data-value="0.8" data-tsv="0.8\t\t">0.800×' in table
    assert 'data-value="1.2" data-tsv="1.2\t\t">1.200×' in table
    tpot = next(v for v in ExperimentAnalysis.objects.get().verdicts if v["metric"] == "tpot")
    assert tpot["text"].endswith(
        "From the files' means (they hold no per-request rows): TPOT 1.50× at 2, point estimates without an "
        "interval or a verdict."
    )
    assert "[" not in table.split("</table>")[0].split("<tbody>")[1]  # no interval anywhere in it


@pytest.mark.django_db
def test_the_point_estimate_of_files_without_rows_is_the_paired_speedup_of_the_same_files_with_them(logged_in_client):
    """No request failed at concurrency 1, so the files' means are over the prompts both completed:
    the point from them equals the speedup from the per-request rows."""
    detailed = [(name, (FIXTURES / name).read_bytes()) for name in ("baseline-c1.json", "ngram-k3-c1.json")]
    post_import(logged_in_client, detailed, name="detailed")
    paired = {e.metric: e for e in SpeedupEstimate.objects.filter(experiment__name="detailed")}
    post_import(
        logged_in_client, [bench_file(name, name) for name in ("baseline-c1.json", "ngram-k3-c1.json")], name="summary"
    )
    summary = {e.metric: e for e in SpeedupEstimate.objects.filter(experiment__name="summary")}

    for metric in ("ttft", "tpot", "e2e"):
        assert (paired[metric].n_pairs, paired[metric].outcome) == (8, "too few blocks")
        assert summary[metric].outcome == "point estimate"
        assert summary[metric].point == pytest.approx(paired[metric].point, rel=1e-9)
    raw_base, raw_arm = real_file("baseline-c1.json"), real_file("ngram-k3-c1.json")
    assert summary["tpot"].point == pytest.approx(raw_base["mean_tpot_ms"] / raw_arm["mean_tpot_ms"])
