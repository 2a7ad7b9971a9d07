"""Re-run and clone open the form filled in and link the new experiment to its origin;
cancelling stops what is open and keeps what completed, for its owner only."""

import pytest
from django.test import Client
from django.urls import reverse

from experiments import lifecycle
from experiments.definition import prefill
from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import services as execution
from experiments.models import Arm, Experiment, IllegalTransition, Run
from experiments.prompts.catalog import prompt_set_hash
from tests.factories import PASSWORD, RunFactory, UserFactory, experiment_fields, form_data

pytestmark = pytest.mark.django_db

# Fields a re-run must carry over unchanged.
PROTOCOL = [
    "target_model", "dtype", "max_model_len", "workload_kind", "prompt_set", "prompt_set_hash", "synthetic_input_len",
    "num_prompts", "max_tokens", "ignore_eos", "temperature", "top_p", "seed", "concurrency_levels", "repetitions",
    "server_per_block", "aa_replicate", "equivalence_margin", "warmup_requests", "request_rate", "slo_ttft_ms",
    "slo_tpot_ms", "slo_e2e_ms", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype",
    "quantization",
]  # fmt: skip


@pytest.fixture
def origin(user, celery_dispatch, settings):
    """An experiment made through the form, as a user would make it."""
    form = form_data(
        concurrency_levels="1, 4", num_prompts="16", repetitions="3", aa_replicate="on",
        max_num_seqs="8", max_num_batched_tokens="2048", kv_cache_dtype="fp8",
    )  # fmt: skip
    client = Client()
    client.force_login(user)
    response = client.post(reverse("experiments:create"), form)
    assert response.status_code == 302, response.context["form"].errors
    experiment = Experiment.objects.get()
    Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.FINISHED, vllm_versions=["0.32.0"])
    experiment.refresh_from_db()
    return experiment


def _arms(experiment):
    return [(a.method, a.num_speculative_tokens, a.params, a.label, a.is_replicate) for a in experiment.arms.all()]


def test_run_again_offers_name_queue_and_version_beside_the_protocol(logged_in_client, origin):
    response = logged_in_client.get(reverse("experiments:rerun", args=[origin.pk]))

    assert response.status_code == 200
    form = response.context["form"]
    assert form["name"].value() == f"{origin.name} (re-run)"
    assert form["worker_queue"].value() == "cpu"
    assert "Protocol of #" in response.text
    assert "prompt-set-changed" not in response.text


def test_run_again_warns_that_a_sweep_would_fail_on_the_cpu_only_queues(logged_in_client, origin, live_workers):
    """The live workers (tests/conftest.py): one without a GPU on `cpu`; here also one with a GPU on `h100`."""
    live_workers.return_value = (
        {"cpu@a": [{"name": "cpu"}], "gpu@b": [{"name": "h100"}]},
        {
            "cpu@a": {"host_name": "a", "cpu_model": "Test CPU", "gpu_name": "", "gpu_count": 0},
            "gpu@b": {"host_name": "b", "cpu_model": "Test CPU", "gpu_name": "NVIDIA H100", "gpu_count": 1},
        },
    )
    url = reverse("experiments:rerun", args=[origin.pk])
    assert "rerun-sweep-cpu-only" not in logged_in_client.get(url).text  # the origin has no sweep

    Arm.objects.filter(experiment=origin, method=Arm.Method.NGRAM).update(synthetic_sweep=[1.5, 2.5])
    text = logged_in_client.get(url).text

    assert (
        'every live worker on <span class="mono">cpu</span> computes on CPU, so there the sweep\'s runs would fail'
    ) in text.replace("&#x27;", "'")
    assert "h100</span> computes" not in text


def test_run_again_repeats_the_protocol_on_the_chosen_queue_and_links_back(
    logged_in_client, origin, celery_dispatch, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = logged_in_client.post(
            reverse("experiments:rerun", args=[origin.pk]),
            {"name": "again on h100", "worker_queue": "h100", "requested_vllm_version": "0.33.0"},
        )

    rerun = Experiment.objects.exclude(pk=origin.pk).get()
    assert response.status_code == 302
    assert response.url == reverse("experiments:detail", args=[rerun.pk])
    assert {f: getattr(rerun, f) for f in PROTOCOL} == {f: getattr(origin, f) for f in PROTOCOL}
    assert _arms(rerun) == _arms(origin)
    assert (rerun.origin, rerun.origin_kind) == (origin, Experiment.OriginKind.RERUN)
    assert (rerun.worker_queue, rerun.requested_vllm_version, rerun.name) == ("h100", "0.33.0", "again on h100")
    assert rerun.runs.count() == origin.runs.count()
    celery_dispatch.assert_called_with(args=[rerun.id], queue="h100")
    page = logged_in_client.get(response.url).text
    assert f'Re-run of <a href="/experiments/{origin.pk}/">#{origin.pk}' in page
    assert f"/compare/?experiments={origin.pk}&amp;experiments={rerun.pk}" in page
    origin_page = logged_in_client.get(reverse("experiments:detail", args=[origin.pk])).text
    assert f'#{rerun.pk} again on h100</a> <span class="muted">(re-run, queued)' in origin_page


def test_run_again_refuses_a_bad_queue_or_version_and_saves_nothing(logged_in_client, origin):
    response = logged_in_client.post(
        reverse("experiments:rerun", args=[origin.pk]),
        {"name": "x", "worker_queue": "no spaces allowed", "requested_vllm_version": "<0.33>"},
    )

    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"worker_queue", "requested_vllm_version"}
    assert Experiment.objects.count() == 1


def test_a_protocol_that_fails_todays_rules_is_not_run_again(logged_in_client, origin):
    Experiment.objects.filter(pk=origin.pk).update(num_prompts=2)  # fewer than 4 × the highest level

    response = logged_in_client.post(
        reverse("experiments:rerun", args=[origin.pk]), {"name": "again", "worker_queue": "cpu"}
    )

    assert response.status_code == 400
    assert any(
        line.startswith("Prompts per level: At least 4 × the highest") for line in response.context["protocol_errors"]
    )
    assert "Clone and edit</a> it to fix these" in response.text
    assert Experiment.objects.count() == 1


def test_run_again_warns_when_the_prompt_set_changed_since(logged_in_client, origin):
    Experiment.objects.filter(pk=origin.pk).update(prompt_set_hash="0" * 64)

    response = logged_in_client.get(reverse("experiments:rerun", args=[origin.pk]))

    assert 'id="prompt-set-changed"' in response.text
    assert prefill.prompt_set_changed(origin) is False  # the instance still has the current hash
    origin.refresh_from_db()
    assert prefill.prompt_set_changed(origin) is True


def test_clone_opens_the_form_filled_in_with_the_origin(logged_in_client, origin):
    response = logged_in_client.get(reverse("experiments:clone", args=[origin.pk]))

    assert response.status_code == 200
    form, arms = response.context["form"], response.context["arms"]
    assert form["name"].value() == f"{origin.name} (clone)"
    assert form["concurrency_levels"].value() == "1, 4"
    assert form["aa_replicate"].value() is True
    assert form["equivalence_margin"].value() == 2.0
    assert (form["max_num_seqs"].value(), form["max_num_batched_tokens"].value()) == (8, 2048)
    assert (form["kv_cache_dtype"].value(), form["gpu_memory_utilization"].value()) == ("fp8", "")
    speculative = [a for a in origin.arms.all() if a.is_speculative]
    assert [f["method"].value() for f in arms] == [a.method for a in speculative]
    assert [f["label"].value() for f in arms] == [a.label for a in speculative]
    assert f'name="origin" value="{origin.pk}"' in response.text
    assert 'id="origin-notice"' in response.text


def test_a_draft_arms_tensor_parallel_size_is_carried_to_the_copy(user, celery_dispatch):
    draft = ArmSpec(
        method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3,
        params={"model": "/models/draft", "draft_tensor_parallel_size": 1},
    )  # fmt: skip
    origin = definition.experiment_create(owner=user, arms=[draft], **experiment_fields(tensor_parallel_size=2))

    (row,) = prefill.arm_initial(origin)
    assert row["draft_tensor_parallel_size"] == 1
    assert prefill.arm_data(origin)["arms-0-draft_tensor_parallel_size"] == 1


def test_a_cloned_form_posted_with_changes_links_to_its_origin(logged_in_client, origin, celery_dispatch):
    data = form_data(concurrency_levels="1, 8", num_prompts="32") | {"origin": origin.pk}

    response = logged_in_client.post(reverse("experiments:create"), data)

    clone = Experiment.objects.exclude(pk=origin.pk).get()
    assert response.status_code == 302
    assert (clone.origin, clone.origin_kind, clone.concurrency_levels) == (origin, "clone", [1, 8])


def test_a_refused_clone_keeps_its_origin(logged_in_client, origin):
    data = form_data(num_prompts="1") | {"origin": origin.pk}

    response = logged_in_client.post(reverse("experiments:create"), data)

    assert response.status_code == 400
    assert f'name="origin" value="{origin.pk}"' in response.text
    assert response.context["origin"] == origin
    assert Experiment.objects.count() == 1


def test_a_plain_new_experiment_has_no_origin(logged_in_client, celery_dispatch):
    logged_in_client.post(reverse("experiments:create"), form_data(requested_vllm_version="0.33.0"))

    experiment = Experiment.objects.get()
    assert (experiment.origin, experiment.origin_kind, experiment.requested_vllm_version) == (None, "", "0.33.0")


# ---------------------------------------------------------------- cancel


def _running_experiment(owner):
    experiment = definition.experiment_create(
        owner=owner,
        arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=2, params={"prompt_lookup_max": 3})],
        name="to cancel", target_model="/m", num_prompts=4, max_tokens=8, concurrency_levels=[1, 2], repetitions=1,
    )  # fmt: skip
    execution.experiment_mark_running(experiment=experiment)
    first, second, *_ = experiment.runs.in_execution_order(server_per_block=True)
    assert execution.run_claim(run_id=first.id, worker_host="w")
    execution.run_mark_succeeded(run_id=first.id)
    assert execution.run_claim(run_id=second.id, worker_host="w")
    return experiment, first, second


def test_the_owner_cancels_open_runs_and_keeps_the_completed_one(logged_in_client, user, celery_dispatch):
    experiment, done, running = _running_experiment(user)

    response = logged_in_client.post(reverse("experiments:cancel", args=[experiment.pk]))

    assert response.status_code == 302
    experiment.refresh_from_db()
    assert (experiment.status, experiment.cancelled_by) == (Experiment.Status.CANCELLED, user)
    statuses = dict(experiment.runs.values_list("id", "status"))
    assert statuses.pop(done.id) == Run.Status.SUCCEEDED
    assert set(statuses.values()) == {Run.Status.CANCELLED}
    assert experiment.runs.get(id=running.id).error == "Cancelled by alice."
    page = logged_in_client.get(response.url).text
    assert 'id="cancelled"' in page
    assert "Cancelled by alice" in page
    assert page.count("status-cancelled") >= 3


def test_someone_else_may_not_cancel(user, celery_dispatch):
    experiment, *_ = _running_experiment(user)
    client = Client()
    client.force_login(UserFactory(username="bob"))

    assert client.post(reverse("experiments:cancel", args=[experiment.pk])).status_code == 403
    assert "Cancel the experiment" not in client.get(reverse("experiments:detail", args=[experiment.pk])).text
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.RUNNING


def test_staff_may_cancel(user, celery_dispatch):
    experiment, *_ = _running_experiment(user)
    client = Client()
    client.force_login(UserFactory(username="ops", is_staff=True))

    client.post(reverse("experiments:cancel", args=[experiment.pk]))

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.CANCELLED


def test_cancel_is_a_post_with_csrf(user, celery_dispatch):
    experiment, *_ = _running_experiment(user)
    client = Client(enforce_csrf_checks=True)
    client.login(username="alice", password=PASSWORD)

    assert client.get(reverse("experiments:cancel", args=[experiment.pk])).status_code == 405
    assert client.post(reverse("experiments:cancel", args=[experiment.pk])).status_code == 403
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.RUNNING


def test_a_finished_experiment_has_nothing_to_cancel(logged_in_client, user):
    run = RunFactory(status=Run.Status.SUCCEEDED, experiment__owner=user, arm__experiment__owner=user)
    experiment = run.experiment
    Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.FINISHED)

    response = logged_in_client.post(reverse("experiments:cancel", args=[experiment.pk]), follow=True)

    assert "nothing to cancel" in response.text
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.FINISHED


def test_a_worker_cannot_start_or_finish_a_cancelled_experiment(user, celery_dispatch):
    experiment = definition.experiment_create(
        owner=user, arms=[], name="x", target_model="/m", num_prompts=4, max_tokens=8, concurrency_levels=[1]
    )
    stale = Experiment.objects.get(pk=experiment.pk)  # what a worker loaded before the cancel
    execution.experiment_cancel(experiment=experiment, by=user)

    with pytest.raises(IllegalTransition):
        execution.experiment_mark_running(experiment=stale)
    with pytest.raises(IllegalTransition):
        lifecycle.experiment_finish(experiment=stale)
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.CANCELLED
    assert experiment.started_at is None


def test_the_current_prompt_hash_is_what_a_rerun_records(logged_in_client, origin, celery_dispatch):
    Experiment.objects.filter(pk=origin.pk).update(prompt_set_hash="0" * 64)

    logged_in_client.post(reverse("experiments:rerun", args=[origin.pk]), {"name": "again", "worker_queue": "cpu"})

    rerun = Experiment.objects.exclude(pk=origin.pk).get()
    assert rerun.prompt_set_hash == prompt_set_hash(origin.prompt_set)
