"""The host's state over an experiment's runs on its page (experiments/analysis/host_states.py):
the protocol card's line, the runs under foreign load flagged, and the words marked when the
blocks ran under different host states; and the columns a run's state is stored in."""

from html import unescape

import pytest
from django.urls import reverse

from experiments.analysis import host_states
from experiments.analysis.services import experiment_analyse
from experiments.measurement.engine.host_load import HostState
from experiments.models import RunSummary
from tests.factories import EnvironmentSnapshotFactory, seed_finished_experiment
from tests.results.helpers import run_summary, two_arms
from workers.storage.ingest import host_fields

pytestmark = pytest.mark.django_db


def _runs(foreign):
    """{block: other processes' share} for both arms at level 1."""
    experiment, baseline, arm = two_arms()
    for block, share in foreign.items():
        for side in (baseline, arm):
            summary = run_summary(
                side, 1, block, host_foreign_cpu=share, host_steal=0.0, host_load=1.5 + block, host_cores=2
            )
            EnvironmentSnapshotFactory(run=summary.run)
    return experiment, baseline, arm


def test_a_quiet_host_is_stated_on_the_card_and_warns_of_nothing():
    experiment, baseline, arm = _runs({1: 0.01, 2: 0.03})
    runs = host_states.host_runs(experiment)
    assert host_states.card_sentence(runs) == "other processes took 1%–3% of the CPU, load 2.5–3.5; over 4 runs"
    assert host_states.host_warnings(runs, {baseline.id: "baseline", arm.id: "n-gram k=4"}) == []


def test_runs_under_foreign_load_are_flagged_and_the_words_marked():
    experiment, baseline, arm = _runs({1: 0.02, 2: 0.40})
    runs = host_states.host_runs(experiment)
    assert host_states.card_sentence(runs).endswith("; 2 of 4 runs under foreign load")
    flagged, marked = host_states.host_warnings(runs, {baseline.id: "baseline", arm.id: "n-gram k=4"})
    assert "n-gram k=4 at 1, block 2 (other processes 40% of the CPU)" in flagged
    assert "foreign load in block(s) 2" in marked
    assert host_states.block_states(runs).differ


def test_runs_recorded_before_the_host_was_read_say_nothing():
    experiment, baseline, _ = two_arms()
    run_summary(baseline, 1, 1)
    assert host_states.host_runs(experiment) == []
    assert host_states.card_sentence([]) == ""


def test_the_protocol_card_shows_the_host_state(logged_in_client):
    experiment, _, _ = _runs({1: 0.02, 2: 0.40})
    html = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).text
    card = unescape(html.split('id="protocol-host-state"')[1].split("</dd>")[0])
    assert "other processes took 2%–40% of the CPU, load 2.5–3.5; 2 of 4 runs under foreign load" in card
    # Each figure is defined beside it, with the thresholds the flags use.
    for term in ("Other processes' share", "load:", "steal:", "memory stalls:", "GPU used by others:"):
        assert term in card
    assert "more than 10% of the CPU, more than 5% was stolen, or others kept the GPU more than 10% busy" in card
    assert "more than 15% apart" in card


def test_a_run_s_state_is_stored_in_its_summary_s_host_columns():
    state = HostState(foreign_cpu=0.2, steal=0.01, memory_stall=None, load=3.0, cores=2, gpu_foreign=0.5)
    assert host_fields(state) == {
        "host_foreign_cpu": 0.2, "host_steal": 0.01, "host_load": 3.0, "host_cores": 2,
        "host_memory_stall": None, "host_gpu_foreign": 0.5,
    }  # fmt: skip
    assert host_fields(None) == {}


def test_the_question_marks_its_words_when_its_blocks_ran_under_different_host_states(logged_in_client):
    experiment = seed_finished_experiment()  # 3 blocks
    summaries = RunSummary.objects.filter(run__experiment=experiment)
    summaries.update(host_foreign_cpu=0.02, host_steal=0.0, host_load=1.0, host_cores=2)
    summaries.filter(run__repetition=3).update(host_foreign_cpu=0.40)
    experiment_analyse(experiment=experiment)
    html = unescape(logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).text)
    mark = html.split('id="question-host-states">')[1].split("</p>")[0]
    assert mark == (
        "† Its blocks ran under different host states: foreign load in block(s) 3; other processes took 2%–40% "
        "of its CPU: the words below hold for that mix of host states."
    )
    experiment.analysis.refresh_from_db()
    assert any(
        w.startswith("The words hold for the host states their blocks ran under") for w in experiment.analysis.warnings
    )
