"""The draft model's cost measured through the real parts: the demo's draft-model arm and its
calibration arm (the draft served alone) on real vLLM CPU servers driven by a Celery worker,
three server starts in all; the stored c, the prediction built on it and the page's text."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from experiments import prediction, services
from experiments.models import Arm, EnvironmentSnapshot, Experiment, Run, SpeedupEstimate
from experiments.services import ArmSpec
from experiments.workloads import prompt_set_hash
from tests.factories import experiment_fields
from tests.worker_fixtures import wait_for_experiment

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
DRAFT = settings.SPECDASH_MODELS_DIR / "draft"


@pytest.mark.skipif(not (DRAFT / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_the_calibration_arm_measures_the_draft_cost_that_the_prediction_uses(celery_worker_process):
    owner = get_user_model().objects.create_user(username="calibration", password="pw-for-tests")
    experiment = services.experiment_create(
        owner=owner,
        arms=[ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=4, params={"model": str(DRAFT)})],
        **experiment_fields(
            name="draft cost", prompt_set="code_edit", prompt_set_hash=prompt_set_hash("code_edit"), num_prompts=4,
            max_tokens=16, temperature=0.0, concurrency_levels=[1, 2], repetitions=2, server_per_block=False,
            warmup_requests=1, aa_replicate=False, draft_calibration=True,
        ),
    )  # fmt: skip

    experiment = wait_for_experiment(experiment.id, timeout_s=900)

    assert experiment.status == Experiment.Status.FINISHED, list(experiment.runs.values_list("error", flat=True))
    assert not experiment.runs.exclude(status=Run.Status.SUCCEEDED).exists()
    calibration = experiment.arms.get(is_calibration=True)
    draft_arm = experiment.arms.get(method=Arm.Method.DRAFT_MODEL)
    assert calibration.label == "calibration: draft model alone (draft)"
    # Its server served the draft model alone, with plain decoding.
    command = EnvironmentSnapshot.objects.filter(run__arm=calibration).first().server_command
    assert command[command.index("--model") + 1] == str(DRAFT)
    assert "--speculative-config" not in command
    assert not SpeedupEstimate.objects.filter(arm=calibration).exists()

    series = experiment.analysis.series
    [stored] = series["calibration"]
    rows = {row["level"]: row for row in stored["rows"]}
    assert sorted(rows) == [1, 2]
    points = series["predicted"][str(draft_arm.id)]["points"]
    for point in points:
        row = rows[point["level"]]
        # c = the draft's step time / the baseline's: a 1-layer draft against the 4-layer target.
        # Both blocks as a rule; a block whose streamed chunks merged (the client read late on a
        # loaded host) has no step time to give, and c then rests on the other one.
        assert row["blocks"] in (1, 2)
        assert point["cost_source"] == prediction.MEASURED
        assert point["cost_ratio"] == pytest.approx(row["step_ms"] / row["baseline_step_ms"], rel=1e-9)
        assert 0 < point["cost_ratio"] < 1
        assert 1 <= point["tokens_per_step"] <= 5
        assert point["predicted"] == pytest.approx(point["tokens_per_step"] / (4 * point["cost_ratio"] + 1))
        assert point["agreement"] in ("agree", "part")
        assert point["measured_lo"] <= point["measured"] <= point["measured_hi"]

    client = Client()
    client.force_login(owner)
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).text
    assert 'id="table-calibration"' in html
    assert "measured at this level by the calibration arm" in html
    assert "with each draft model served alone to measure its cost" in html
    assert series["predicted"][str(draft_arm.id)]["sentence"] in html.replace("&#x27;", "'")
    print(series["predicted"][str(draft_arm.id)]["sentence"], stored["rows"])  # the figures, with pytest -s
    api = client.get(reverse("api:experiment-results", args=[experiment.pk])).json()
    assert [arm["is_calibration"] for arm in api["arms"]] == [False, False, True]
    assert api["series"]["calibration"] == series["calibration"]
