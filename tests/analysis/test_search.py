"""A break-even search through the worker's block loop (experiments/analysis/continuation.py,
experiments/lifecycle.experiment_block_add) and what the page says of it
(experiments/analysis/search.py), on recorded runs with known speedups."""

import json
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.urls import reverse
from django.utils import timezone

from experiments import lifecycle
from experiments.analysis import continuation, primary, search
from experiments.analysis.loader import load_runs
from experiments.analysis.services import experiment_analyse
from experiments.measurement.deploy import batch_schedule
from experiments.measurement.planning import planner
from experiments.measurement.stats.sequential import PER_CELL_T
from experiments.models import Arm, Experiment, Run
from tests.factories import (
    ArmFactory,
    EnvironmentSnapshotFactory,
    ExperimentFactory,
    RequestRecordFactory,
    RunFactory,
    RunSummaryFactory,
)

pytestmark = pytest.mark.django_db

BASELINE_TPOT = 20.0
# The arm's engine-timed TPOT by level, the same in every block: 2x faster at 1 and 8 (called at the first
# look: no spread), 0.8x at 16 (called slower).
ARM_TPOT = {1: 10.0, 8: 10.0, 16: 25.0}


def _run(arm: Arm, block: int, level: int, tpot: float, *, vllm: str = "0.32.0") -> Run:
    run = RunFactory(
        arm=arm, experiment=arm.experiment, concurrency=level, repetition=block, status=Run.Status.SUCCEEDED
    )
    RunSummaryFactory(run=run, output_throughput=1000 / tpot, request_throughput=100 / tpot, tpot_mean_ms=tpot)
    EnvironmentSnapshotFactory(run=run, vllm_version=vllm)
    for index in range(4):
        RequestRecordFactory(
            run=run, prompt_index=index, ttft_ms=50.0, output_tokens=11, e2e_ms=50 + 10 * tpot, tpot_ms=tpot,
            server_decode_ms=10 * tpot, server_tpot_ms=tpot,
        )  # fmt: skip
    return run


def _search(**fields) -> tuple[Experiment, Arm, Arm]:
    search = {"search_low": 1, "search_high": 16, "search_resolution": 2.0}
    experiment = ExperimentFactory(
        concurrency_levels=[1, 16], repetitions=8, status=Experiment.Status.RUNNING, sequential=True,
        verdict_method=PER_CELL_T,  # the per-cell method's words, which these block ratios were chosen for
        started_at=timezone.now() - timedelta(minutes=30), **search | fields,
    )  # fmt: skip
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    arm = ArmFactory(
        experiment=experiment, position=1, label="draft k=4", method=Arm.Method.NGRAM, num_speculative_tokens=4
    )
    return experiment, baseline, arm


def _block(experiment: Experiment, block: int, *, vllm: str = "0.32.0") -> None:
    """Record every run queued for `block` as run, with the known TPOTs."""
    for run in experiment.runs.filter(repetition=block).select_related("arm"):
        run.delete()
        tpot = BASELINE_TPOT if run.arm.method == Arm.Method.BASELINE else ARM_TPOT[run.concurrency]
        if run.arm.confirms_id is not None:
            tpot = BASELINE_TPOT if run.concurrency == 16 else ARM_TPOT[run.concurrency]
        _run(run.arm, block, run.concurrency, tpot, vllm=vllm)


def _step(experiment: Experiment) -> continuation.Step:
    decided = primary.primary_decisions(experiment, load_runs(experiment), final=False)
    return continuation.next_step(experiment, decided)


def test_a_search_queues_its_first_block_only():
    assert ExperimentFactory.build(sequential=True, search_low=1, search_high=16, search_resolution=2.0,
                                   repetitions=8).first_blocks == 1  # fmt: skip
    assert ExperimentFactory.build(sequential=True, repetitions=8).first_blocks == 3


def test_after_the_first_block_the_search_places_the_level_where_the_points_cross_1():
    experiment, baseline, arm = _search()
    for level in (1, 16):
        _run(baseline, 1, level, BASELINE_TPOT)
        _run(arm, 1, level, ARM_TPOT[level])
    step = _step(experiment)
    # 2.0 at 1, 0.8 at 16: ln c = ln 16 · ln 2 / ln 2.5 = 2.098, c = 8.2: level 8 (grid 1, 2, 4, 8, 16).
    assert step.block == 2
    assert step.searches[arm.id].added == 8
    assert step.levels == {baseline.id: {1, 8, 16}, arm.id: {1, 8, 16}}

    assert lifecycle.experiment_block_add(experiment=experiment)
    experiment.refresh_from_db()
    assert experiment.concurrency_levels == [1, 8, 16]
    queued = experiment.runs.filter(repetition=2)
    assert sorted((run.arm_id, run.concurrency) for run in queued) == sorted(
        (a.id, level) for a in (baseline, arm) for level in (1, 8, 16)
    )


def _run_search(experiment: Experiment, baseline: Arm, arm: Arm, *, vllm: str = "0.32.0") -> list[continuation.Step]:
    """Block 1 by hand, then the worker's loop: record each block queued, ask for the next."""
    for level in (1, 16):
        _run(baseline, 1, level, BASELINE_TPOT, vllm=vllm)
        _run(arm, 1, level, ARM_TPOT[level], vllm=vllm)
    steps = []
    while True:
        steps.append(_step(experiment))
        if not lifecycle.experiment_block_add(experiment=experiment):
            return steps
        experiment.refresh_from_db()
        _block(experiment, steps[-1].block, vllm=vllm)


def test_the_search_finds_the_break_even_then_confirms_the_derived_schedule():
    experiment, baseline, arm = _search()
    steps = _run_search(experiment, baseline, arm)

    # Blocks 1-3: 1 and 16 settle at the first look (faster, slower); 8 entered at block 2, settles at its own
    # third block (block 4): the bracket (8, 16) are neighbours on the grid.
    found = next(step for step in steps if step.confirm)
    assert found.blocks_run == 4
    assert found.searches[arm.id].state == planner.FOUND
    confirmation = experiment.arms.get(confirms=arm)
    schedule = [[1, 11, 4], [12, 16, 0]]  # isqrt(8 * 16) = 11
    assert confirmation.params[batch_schedule.KEY] == schedule
    assert confirmation.speculative_config()["num_speculative_tokens"] == 4
    # The confirmation runs at the bracket's levels with the baseline, from block 5, until its cells settle
    # (3 blocks for its first look): faster at 8, equivalent at 16 (k = 0 there: the baseline's TPOT).
    runs = experiment.runs.filter(repetition=5)
    assert {(run.arm_id, run.concurrency) for run in runs} == {
        (baseline.id, 8), (baseline.id, 16), (confirmation.id, 8), (confirmation.id, 16),
    }  # fmt: skip
    assert steps[-1].stop == continuation.SEARCHED
    assert steps[-1].blocks_run == 7


def test_the_page_states_the_bracket_the_crossing_and_the_confirmation():
    experiment, baseline, arm = _search()
    _run_search(experiment, baseline, arm)
    analysis = _finished(experiment).analysis

    summary = analysis.series["question"]["search"]
    assert summary["grid"] == [1, 2, 4, 8, 16]
    assert summary["family_size"] == 4
    (searched,) = summary["arms"]
    assert (searched["state"], searched["below"], searched["above"]) == (planner.FOUND, 8, 16)
    # ln c = ln 8 + ln 2 · ln 2 / ln(2 / 0.8) = 2.0794 + 0.5245 = 2.6039: c = 13.5
    assert searched["crossing"] == pytest.approx(13.52, abs=0.01)
    assert [(row["level"], row["entered"], row["outcome"]) for row in searched["levels"]] == [
        (1, 1, "faster"), (8, 2, "faster"), (16, 1, "slower"),
    ]  # fmt: skip
    assert searched["confirmation"]["verdict"] == "confirmed"
    assert "pays up to 8" in searched["sentence"]
    # The chart's break-even for the primary metric is the search's bracket.
    (row,) = [v for v in analysis.verdicts if v["arm_id"] == arm.id and v["metric"] == "server_tpot"]
    assert row["break_even"] == {"state": "bracketed", "level": searched["crossing"], "lo": 8, "hi": 16}
    # The confirmation arm measures a schedule, not a break-even: its row says so.
    confirmation = searched["confirmation"]["arm_id"]
    (row,) = [v for v in analysis.verdicts if v["arm_id"] == confirmation and v["metric"] == "server_tpot"]
    assert row["break_even"]["state"] == "confirmation"
    assert "derived from draft k=4's break-even" in row["break_even"]["reason"]


def test_no_confirmation_where_the_worker_s_vllm_cannot_run_a_schedule():
    experiment, baseline, arm = _search()
    steps = _run_search(experiment, baseline, arm, vllm="0.31.2")
    assert not any(step.confirm for step in steps)
    assert not experiment.arms.filter(confirms=arm).exists()
    assert steps[-1].stop == continuation.SEARCHED
    assert steps[-1].blocks_run == 4


def test_confirmation_verdict_words():
    assert search.confirmation_verdict(["faster", "equivalent"]) == "confirmed"
    assert search.confirmation_verdict(["faster", "slower"]) == "refuted"
    assert search.confirmation_verdict(["not worth it", "equivalent"]) == "refuted"
    assert search.confirmation_verdict(["faster", "open"]) == "not settled"
    assert search.confirmation_verdict([]) == "not settled"


def _proposal(page: str) -> dict[str, list[str]]:
    """The decision form's prefill in the page's "Propose this as a decision" link."""
    href = re.search(r'id="recommendation-propose" href="([^"]+)"', page)[1].replace("&amp;", "&")
    return parse_qs(urlparse(href).query)


def _finished(experiment: Experiment) -> Experiment:
    Experiment.objects.filter(id=experiment.id).update(status=Experiment.Status.FINISHED, finished_at=timezone.now())
    experiment.refresh_from_db()
    experiment_analyse(experiment=experiment)
    return experiment


def test_the_page_recommends_per_band_and_proposes_the_confirmed_schedule(client):
    experiment, baseline, arm = _search()
    _run_search(experiment, baseline, arm)
    experiment = _finished(experiment)
    client.force_login(experiment.owner)
    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()

    assert "pays up to 8" in page
    assert 'id="recommendation-bands"' in page
    assert "run draft k=4" in page
    assert "no speculation: plain decoding" in page
    assert "Derived and confirmed:" in page
    assert "num_speculative_tokens_per_batch_size&quot;: [[1, 11, 4], [12, 16, 0]]" in page
    confirmation = experiment.arms.get(confirms=arm)
    link = parse_qs(
        urlparse(re.search(r'id="recommendation-propose" href="([^"]+)"', page)[1].replace("&amp;", "&")).query
    )
    assert link["kind"] == ["deploy"]
    assert link["arm"] == [str(confirmation.id)]
    assert link["max_concurrency"] == ["16"]
    assert link["experiments"] == [str(experiment.id)]


def test_without_a_confirmation_the_arm_itself_is_proposed_up_to_its_break_even(client):
    experiment, baseline, arm = _search()
    _run_search(experiment, baseline, arm, vllm="0.31.2")
    experiment = _finished(experiment)
    client.force_login(experiment.owner)
    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()
    link = parse_qs(
        urlparse(re.search(r'id="recommendation-propose" href="([^"]+)"', page)[1].replace("&amp;", "&")).query
    )
    assert (link["kind"], link["arm"], link["max_concurrency"]) == (["deploy"], [str(arm.id)], ["8"])
    assert "Derived and confirmed" not in page


def test_a_break_even_no_confirmation_could_run_shows_the_derived_config_and_why(client):
    experiment, baseline, arm = _search()
    _run_search(experiment, baseline, arm, vllm="0.31.2")
    experiment = _finished(experiment)
    (searched,) = experiment.analysis.series["question"]["search"]["arms"]
    assert json.loads(searched["derived"])[batch_schedule.KEY] == [[1, 11, 4], [12, 16, 0]]
    assert searched["unconfirmed_because"].startswith("the worker's vLLM (0.31.2) does not take")
    client.force_login(experiment.owner)
    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()
    assert "Derived, not measured:" in page
    assert "does not take num_speculative_tokens_per_batch_size" in page
    assert "Derived, to confirm as an arm first" in _proposal(page)["rationale"][0]


def test_bands_between_neighbouring_whole_levels_leave_no_empty_band():
    from experiments.results.search_recommendation import _bands

    search = {"low": 1, "high": 8}
    found = {"state": planner.FOUND, "below": 1, "above": 2, "arm": "a", "arm_id": 1}
    assert [(band["low"], band["high"], band["word"]) for band in _bands(search, found, [found])] == [
        (1, 1, "run arm"), (2, 8, "no speculation"),
    ]  # fmt: skip
    nowhere = {"state": planner.PAYS_NOWHERE, "below": None, "above": 1, "arm": "a", "arm_id": 1}
    assert [band["word"] for band in _bands(search, None, [nowhere])] == ["no speculation"]
    searching = {"state": planner.SEARCHING, "below": None, "above": None, "arm": "a", "arm_id": 1}
    assert [band["word"] for band in _bands(search, None, [nowhere, searching])] == ["undecided"]


def test_a_search_stopped_before_its_first_look_says_what_would_settle_each_level():
    experiment, baseline, arm = _search(max_device_minutes=0.1)  # spent at once: one block only
    for level in (1, 16):
        _run(baseline, 1, level, BASELINE_TPOT)
        _run(arm, 1, level, ARM_TPOT[level])
    RunFactory._meta.model.objects.filter(experiment=experiment).update(server_start_s=30.0)
    assert not lifecycle.experiment_block_add(experiment=experiment)
    question = _finished(experiment).analysis.series["question"]
    assert question["stop"] == continuation.BUDGET
    # One block each, no spread yet: at least the first look's 3 blocks, 2 more, for the arm and the baseline.
    assert [text.split(" (")[0] for text in question["open"]] == ["draft k=4 at 1", "draft k=4 at 16"]
    assert all("about 2 more blocks" in text and "would settle it" in text for text in question["open"])


def test_an_arm_whose_guard_fails_in_its_band_is_not_run_there():
    """The search found draft's break-even between 4 and 8; at 4 its engine TPOT is faster but its
    output throughput guard is shown worse ("costs"): no band runs it, the answer is undecided. With
    the guard shown at 1 and 4 it runs up to 4; a level above the band does not count."""
    from experiments.results.search_recommendation import _bands, _best

    search = {"low": 1, "high": 16}
    found = {"state": planner.FOUND, "below": 4, "above": 8, "arm": "draft", "arm_id": 1}

    def cell(level, outcome, word):
        return {"arm_id": 1, "level": level, "outcome": outcome, "joint": {"word": word}}

    costs = [cell(1, "faster", "pays"), cell(4, "faster", "costs")]
    assert _best([found], costs) is None
    assert [band["word"] for band in _bands(search, _best([found], costs), [found])] == ["undecided"]
    unshown = [cell(1, "faster", "pays"), cell(4, "faster", "inconclusive")]
    assert _best([found], unshown) is None
    pays = [cell(1, "faster", "pays"), cell(4, "faster", "pays"), cell(16, "slower", "costs")]
    assert _best([found], pays) is found
    assert [(b["low"], b["high"], b["word"]) for b in _bands(search, _best([found], pays), [found])] == [
        (1, 4, "run arm"), (5, 7, "break-even"), (8, 16, "no speculation")]  # fmt: skip
    open_primary = [cell(1, "open", "open"), cell(4, "faster", "pays")]
    assert _best([found], open_primary) is found  # the search's monotone reading of an open level stays
    legacy = [{"arm_id": 1, "level": 4, "outcome": "faster"}]
    assert _best([found], legacy) is found
