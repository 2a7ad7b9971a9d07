"""The synthetic acceptance sweep: the break-even interpolation and the speedup points on
hand-computed cases, the form's rule for the lengths, the schedule and the servers it adds,
and that the synthetic runs never reach the arm's own statistics."""

import json
import math
import random
import re
from html import unescape

import pytest
from django.urls import reverse

from experiments.analysis import acceptance_sweep, loader
from experiments.analysis import services as analysis
from experiments.analysis.acceptance_sweep import (
    AT_OR_BELOW,
    BETWEEN,
    BEYOND,
    NO_POINTS,
    BreakEven,
    SweepPoint,
    break_even,
)
from experiments.api.submission import spec_from_experiment, submission_from_spec
from experiments.definition import services as definition
from experiments.definition.forms.arms import ARM_FORMSET_PREFIX, ArmForm, ArmFormSet
from experiments.definition.forms.experiment import ExperimentForm
from experiments.models import Arm, ExperimentAnalysis, RequestRecord, Run, RunSummary, SpeedupEstimate
from experiments.review import history
from tests.factories import (
    NGRAM_ARM_FORM,
    RunFactory,
    experiment_fields,
    form_data,
    seed_finished_experiment,
    seed_run_results,
)
from workers.server import launch
from workers.sessions import sessions_group


def _points(*pairs) -> list[SweepPoint]:
    return [SweepPoint(length, speedup, 1, None) for length, speedup in pairs]


# ---------------------------------------------------------------- break-even, by hand


def test_break_even_interpolates_between_the_two_lengths_around_1():
    # 0.8 at 1.5, 1.2 at 2.5: 1 is half way, at 2.0.
    assert break_even(_points((1.5, 0.8), (2.5, 1.2))) == BreakEven(BETWEEN, 2.0)
    # 0.9 at 2, 1.3 at 3: (1 - 0.9) / (1.3 - 0.9) = 1/4 of the way, at 2.25.
    found = break_even(_points((3.0, 1.3), (1.0, 0.5), (2.0, 0.9)))
    assert found.state == BETWEEN
    assert found.length == pytest.approx(2.25)


def test_break_even_is_the_first_crossing_of_a_non_monotone_sweep():
    # Up through 1 between 1.5 and 2 (at 1.5 + 0.2/0.3 × 0.5 = 1.8333), down below 1 at 2.5,
    # up again at 3: the smallest length that reaches 1 is the first crossing.
    found = break_even(_points((1.5, 0.8), (2.0, 1.1), (2.5, 0.95), (3.0, 1.2)))
    assert found.state == BETWEEN
    assert found.length == pytest.approx(1.5 + 0.2 / 0.3 * 0.5)


def test_break_even_at_the_lowest_length_beyond_the_range_and_without_points():
    assert break_even(_points((1.5, 1.0), (2.0, 1.4))) == BreakEven(AT_OR_BELOW, 1.5)
    assert break_even(_points((1.5, 0.5), (2.0, 0.7), (3.0, 0.99))) == BreakEven(BEYOND)
    assert break_even(_points((2.0, 0.7))) == BreakEven(BEYOND)
    assert break_even([]) == BreakEven(NO_POINTS)


def test_speedup_points_are_geometric_means_of_block_ratios_over_blocks_both_ran():
    baseline = {(1, 1): 100.0, (1, 2): 200.0, (4, 1): 300.0}
    synthetic = {
        (2.0, 1, 1): (120.0, 10, 10),  # ratio 1.2
        (2.0, 1, 2): (180.0, 10, 5),  # ratio 0.9
        (3.0, 1, 1): (150.0, 4, 8),  # ratio 1.5
        (2.0, 4, 2): (500.0, 1, 1),  # no baseline at level 4 in block 2: left out
    }

    points = acceptance_sweep.sweep_points(baseline, synthetic)

    assert list(points) == [1]
    first, second = points[1]
    assert (first.length, first.blocks) == (2.0, 2)
    assert first.speedup == pytest.approx(math.sqrt(1.2 * 0.9))
    assert first.measured_tau == pytest.approx(1 + 15 / 20)
    assert (second.length, second.speedup, second.blocks, second.measured_tau) == (3.0, 1.5, 1, 3.0)


def test_the_sentence_gives_the_real_tau_and_each_levels_need():
    levels = [
        acceptance_sweep.LevelSweep(1, [], BreakEven(AT_OR_BELOW, 1.5)),
        acceptance_sweep.LevelSweep(16, [], BreakEven(BETWEEN, 3.1)),
        acceptance_sweep.LevelSweep(64, [], BreakEven(BEYOND)),
    ]
    sweep = acceptance_sweep.ArmSweep(1, "n-gram k=3", 3, 2.4, [1.5, 2.5, 3.5], levels, 9, 3, 0, "")

    assert sweep.sentence == (
        "n-gram k=3: your draft gives τ 2.40; at 1 concurrent request it pays off already at 1.5, the lowest "
        "length swept; at 16 concurrent requests it would need 3.10; at 64 concurrent requests it would need "
        "more than 3.5, beyond the swept range."
    )


# ---------------------------------------------------------------- what the user asks for


def test_the_arm_form_checks_the_sweep_against_its_k():
    form = ArmForm(data=NGRAM_ARM_FORM | {"num_speculative_tokens": "3", "synthetic_sweep": "1.5, 4.5"})
    assert not form.is_valid()
    assert "outside 1 to k + 1 = 4" in form.errors["synthetic_sweep"][0]

    form = ArmForm(data=NGRAM_ARM_FORM | {"num_speculative_tokens": "3", "synthetic_sweep": "3, 1.5"})
    assert form.is_valid(), form.errors
    assert form.arm_spec().synthetic_sweep == (1.5, 3.0)
    assert ArmForm(data=NGRAM_ARM_FORM).is_valid()


@pytest.mark.django_db
def test_the_sweeps_servers_count_toward_the_experiments_time_limit(settings, user):
    """At form_data's two levels and two blocks, with 20 prompts of 100 tokens, the baseline
    and one arm fit in the 2 h a worker may hold the experiment; three sweep servers more do not."""
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 2 * 3600}
    arm = NGRAM_ARM_FORM | {"synthetic_sweep": "1.5, 2.5, 3.5"}
    data = form_data(arms=(arm,), num_prompts="20", max_tokens="100")
    arms = ArmFormSet(data, prefix=ARM_FORMSET_PREFIX)

    assert arms.posted_sweep_lengths() == 3
    assert ExperimentForm(data, user=user, speculative_arms=1).is_valid()
    form = ExperimentForm(data, user=user, speculative_arms=1, sweep_lengths=arms.posted_sweep_lengths())
    assert not form.is_valid()
    assert "With 2 arms and 3 synthetic sweep servers" in str(form.non_field_errors())


@pytest.mark.django_db
def test_the_api_spec_takes_the_sweep_as_a_list_and_gives_it_back(user, celery_dispatch):
    spec = {
        "name": "sweep",
        "prompt_set": "chat",
        "num_prompts": 8,
        "max_tokens": 16,
        "concurrency_levels": [1],
        "repetitions": 1,
        "arms": [{"method": "ngram", "num_speculative_tokens": 3, "synthetic_sweep": [2.5, 1.5]}],
    }
    submission = submission_from_spec(spec, user=user)
    assert submission.arms[0].synthetic_sweep == (1.5, 2.5)

    experiment = definition.experiment_create(owner=user, arms=submission.arms, **submission.fields)

    assert spec_from_experiment(experiment)["arms"][0]["synthetic_sweep"] == [1.5, 2.5]


# ---------------------------------------------------------------- schedule and servers


@pytest.mark.django_db
def test_the_sweep_adds_one_server_per_length_and_block_and_leaves_a_schedule_without_it_alone(user, celery_dispatch):
    fields = experiment_fields(concurrency_levels=[1, 4], repetitions=2, seed=7)
    plain = definition.experiment_create(
        owner=user, arms=[definition.ArmSpec(method="ngram", num_speculative_tokens=3)], **fields
    )
    swept = definition.experiment_create(
        owner=user, arms=[definition.ArmSpec(method="ngram", num_speculative_tokens=3, synthetic_sweep=(1.5, 3.0))],
        **fields,
    )  # fmt: skip

    assert plain.runs.count() == 2 * 2 * 2
    assert swept.runs.count() == 2 * 2 * 2 + 2 * 2 * 2
    assert swept.runs.real().count() == 8
    assert sorted(set(swept.runs.synthetic().values_list("synthetic_acceptance_length", flat=True))) == [1.5, 3.0]
    sessions = sessions_group(
        swept.runs.select_related("arm").in_execution_order(server_per_block=True), server_per_block=True
    )
    assert len(sessions) == 2 * (2 + 2)  # blocks × (baseline, arm, two lengths)
    synthetic = [s for s in sessions if s.synthetic_acceptance_length is not None]
    assert len(synthetic) == 4
    assert all(len(s.runs) == 2 for s in synthetic)
    assert all({r.synthetic_acceptance_length for r in s.runs} == {s.synthetic_acceptance_length} for s in sessions)
    assert "synthetic-1.5" in synthetic[0].name or "synthetic-3" in synthetic[0].name
    # Each block still runs every server once, in an order of its own.
    for block in (1, 2):
        positions = swept.runs.filter(repetition=block).values_list("block_position", flat=True)
        assert sorted(set(positions)) == [1, 2, 3, 4]


@pytest.mark.django_db
def test_a_synthetic_server_is_the_arms_config_with_synthetic_acceptance(settings):
    arm = RunFactory(arm__num_speculative_tokens=3).arm
    args = launch.arm_server_args(arm.experiment, arm, 8100, 2.5)
    config = args[args.index("--speculative-config") + 1]

    assert '"rejection_sample_method": "synthetic"' in config
    assert '"synthetic_acceptance_length": 2.5' in config
    assert '"method": "ngram"' in config
    assert '"num_speculative_tokens": 3' in config
    assert "synthetic" not in " ".join(launch.arm_server_args(arm.experiment, arm, 8100))


# ---------------------------------------------------------------- never mixed in


def _sweep_on(experiment, label="n-gram k=4", lengths=(1.5, 3.0)) -> Arm:
    """Synthetic runs of the arm at every level and block, with results seeded as the worker stores them."""
    arm = experiment.arms.get(label=label)
    arm.synthetic_sweep = list(lengths)
    arm.save(update_fields=["synthetic_sweep"])
    rng = random.Random(99)
    for length in lengths:
        for run in experiment.runs.real().filter(arm=arm):
            synthetic = RunFactory(
                arm=arm, concurrency=run.concurrency, repetition=run.repetition, status=Run.Status.SUCCEEDED,
                synthetic_acceptance_length=length,
            )  # fmt: skip
            seed_run_results(synthetic, rng, requests=4, output_tokens=16)
    return arm


def _headline(experiment) -> tuple:
    found = history.history_rows(experiments=[experiment], metric="tpot")[0].headline
    return found.arm_label, [(cell.level, cell.outcome, cell.estimate.point) for cell in found.cells]


def _estimates(experiment) -> list[tuple]:
    return sorted(
        SpeedupEstimate.objects.filter(experiment=experiment).values_list(
            "arm_id", "concurrency", "metric", "point", "ci_low", "ci_high", "n_repetitions"
        )
    )


@pytest.mark.django_db
def test_synthetic_runs_stay_out_of_the_arms_statistics_verdicts_steps_and_headline():
    experiment = seed_finished_experiment(requests=6, repetitions=2)
    before = (_estimates(experiment), ExperimentAnalysis.objects.get(experiment=experiment).series)
    headline = _headline(experiment)

    _sweep_on(experiment)
    analysis.experiment_analyse(experiment=experiment)

    assert experiment.runs.synthetic().count() == 2 * 2 * 2
    assert (_estimates(experiment), ExperimentAnalysis.objects.get(experiment=experiment).series) == before
    assert _headline(experiment) == headline
    real = RunSummary.objects.succeeded_of(experiment)
    assert real.count() == 3 * 2 * 2
    assert not real.filter(run__synthetic_acceptance_length__isnull=False).exists()
    assert (
        not RequestRecord.objects.succeeded_of(experiment)
        .filter(run__synthetic_acceptance_length__isnull=False)
        .exists()
    )
    assert [r.arm for r in loader.load_runs(experiment)].count(experiment.arms.get(label="n-gram k=4").id) == 4


@pytest.mark.django_db
def test_the_sweep_reads_its_runs_against_the_baseline_of_the_same_level_and_block(logged_in_client, user):
    experiment = seed_finished_experiment(requests=6, repetitions=2, owner=user)
    arm = _sweep_on(experiment)
    baseline = {
        (s.run.concurrency, s.run.repetition): s.output_throughput
        for s in RunSummary.objects.filter(run__arm__label="baseline", run__experiment=experiment).select_related("run")
    }

    (sweep,) = acceptance_sweep.acceptance_sweeps(experiment=experiment)

    assert sweep.arm_id == arm.id
    assert sweep.lengths == [1.5, 3.0]
    assert (sweep.runs, sweep.servers) == (2 * 2 * 2, 2 * 2)
    drafts = sum(s.spec_num_drafts for s in RunSummary.objects.succeeded_of(experiment).filter(run__arm=arm))
    accepted = sum(s.spec_num_accepted_tokens for s in RunSummary.objects.succeeded_of(experiment).filter(run__arm=arm))
    assert sweep.tau == pytest.approx(1 + accepted / drafts)
    for row in sweep.levels:
        for point in row.points:
            ratios = [
                s.output_throughput / baseline[(row.level, s.run.repetition)]
                for s in RunSummary.objects.filter(
                    run__arm=arm, run__concurrency=row.level, run__synthetic_acceptance_length=point.length
                ).select_related("run")
            ]
            assert point.blocks == 2
            assert point.speedup == pytest.approx(math.exp(sum(map(math.log, ratios)) / 2))

    html = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    assert "What acceptance it would take" in html
    assert "your draft gives τ" in html
    assert f'id="sweep-chart-{arm.id}"' in html
    assert 'id="sweep-data"' in html
    assert "Break-even length" in html
    assert "8 synthetic runs on 4 server starts besides the arm" in html
    # The runs table names the synthetic runs for what they are.
    assert html.count("(synthetic acceptance τ = 1.5, not a measurement of the arm)") == 2 * 2
    assert html.count("(synthetic acceptance τ = 3.0, not a measurement of the arm)") == 2 * 2


@pytest.mark.django_db
def test_a_page_without_a_sweep_has_no_sweep_section(logged_in_client, user):
    experiment = seed_finished_experiment(requests=3, repetitions=1, owner=user)
    html = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    assert "acceptance-sweep" not in html
    assert "sweep-data" not in html


def test_the_api_gives_the_pages_sweep_with_its_sentence(logged_in_client, user):
    experiment = seed_finished_experiment(requests=6, repetitions=2, owner=user)
    _sweep_on(experiment)
    html = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    page = json.loads(re.search(r'<script id="sweep-data" type="application/json">(.*?)</script>', html, re.S)[1])

    body = logged_in_client.get(reverse("api:experiment-results", args=[experiment.pk])).json()

    (sweep,) = body["acceptance_sweeps"]
    assert {key: value for key, value in sweep.items() if key != "sentence"} == page[0]
    assert unescape(sweep["sentence"]) in unescape(html)
    assert [len(level["points"]) for level in sweep["levels"]] == [2, 2]


@pytest.mark.django_db
def test_refused_sweep_runs_give_their_reason_and_a_level_without_points_says_so():
    # One server per arm: each length is one server start, whatever the blocks.
    experiment = seed_finished_experiment(requests=6, repetitions=2, server_per_block=False)
    arm = experiment.arms.get(label="n-gram k=4")
    arm.synthetic_sweep = [2.0, 3.0]
    arm.save(update_fields=["synthetic_sweep"])
    reason = "The vLLM server did not start: synthetic acceptance is not supported here"
    for run in experiment.runs.real().filter(arm=arm).order_by("id"):
        for length in arm.synthetic_sweep:
            RunFactory(
                arm=arm, concurrency=run.concurrency, repetition=run.repetition, status=Run.Status.FAILED,
                synthetic_acceptance_length=length, error=f"{reason}\n\nLast lines of its log:\nTraceback ...",
            )  # fmt: skip

    (sweep,) = acceptance_sweep.acceptance_sweeps(experiment=experiment)

    assert (sweep.runs, sweep.failed_runs, sweep.servers) == (2 * 2 * 2, 2 * 2 * 2, 2)
    assert sweep.first_error == reason
    assert [(row.level, row.points, row.break_even.state) for row in sweep.levels] == [
        (1, [], NO_POINTS), (4, [], NO_POINTS),
    ]  # fmt: skip
    assert sweep.sentence.endswith(
        "at 1 concurrent request no synthetic run could be compared with the baseline; "
        "at 4 concurrent requests no synthetic run could be compared with the baseline."
    )
