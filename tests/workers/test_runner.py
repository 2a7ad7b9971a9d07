"""The runner's order of work, with fakes for the vLLM server and the load generator
(tests/workers/fakes.py).

The database, services, schedule and ingestion are real; only the server process and the
HTTP load are replaced, so these tests check which runs share a server, in what order
they run, what each server's start-up is recorded on, and when the model prefetch runs.
"""

import pytest

from experiments.definition.services import ArmSpec
from experiments.execution import services as execution
from experiments.models import Arm, EnvironmentSnapshot, Experiment, RequestRecord, Run
from experiments.prompts.catalog import experiment_prompts
from tests.workers.fakes import NGRAM, SUFFIX, FakeServer, Served, new_experiment, run_all, stored_before_blocks
from workers import runner, sessions
from workers.server import launch

pytestmark = pytest.mark.django_db


def _schedule_order(experiment: Experiment, *order: str) -> list[int]:
    return list(experiment.runs.order_by(*order).values_list("id", flat=True))


def test_no_server_starts_for_a_session_whose_runs_were_all_taken_meanwhile(served, celery_dispatch, monkeypatch):
    # One worker holds an experiment stored before blocks were dispatched; another claims runs of it.
    experiment = stored_before_blocks(new_experiment(celery_dispatch))
    sessions = runner.experiment_sessions(experiment)
    first = sessions[0]

    def listed_then_claimed_elsewhere(experiment):
        # Another worker claims the first session's runs once this one has listed them.
        for run in first.runs:
            assert execution.run_claim(run_id=run.id, worker_host="host-2")
        return sessions

    monkeypatch.setattr(runner, "experiment_sessions", listed_then_claimed_elsewhere)

    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")

    assert len(served.servers) == len(sessions) - 1
    assert not any(run_id in {run.id for run in first.runs} for s in served.servers for run_id in s.run_ids)
    assert set(Run.objects.filter(id__in=[run.id for run in first.runs]).values_list("worker_host", flat=True)) == {
        "host-2"
    }


def test_a_server_per_block_and_arm_in_schedule_order(served, celery_dispatch):
    experiment = run_all(new_experiment(celery_dispatch))

    assert experiment.status == Experiment.Status.FINISHED
    assert len(served.servers) == 3 * 3  # blocks x arms (baseline, replicate, n-gram)
    executed = [run_id for server in served.servers for run_id in server.run_ids]
    assert executed == _schedule_order(experiment, "repetition", "block_position", "level_position")
    for server in served.servers:
        runs = served.runs_of(server)
        assert len({(run.arm_id, run.repetition) for run in runs}) == 1
        assert [run.level_position for run in runs] == [1, 2]
    runs = list(experiment.runs.order_by("started_at"))
    assert [run.id for run in runs] == executed
    assert all(run.status == Run.Status.SUCCEEDED for run in runs)
    assert all(run.started_at <= run.finished_at for run in runs)


def test_block_orders_differ_so_arms_do_not_always_run_in_one_order(served, celery_dispatch):
    experiment = run_all(new_experiment(celery_dispatch))

    first_arm_per_block = [served.runs_of(server)[0] for server in served.servers[::3]]
    orders = {
        tuple(served.runs_of(server)[0].arm_id for server in served.servers[block * 3 : block * 3 + 3])
        for block in range(3)
    }
    assert [run.repetition for run in first_arm_per_block] == [1, 2, 3]
    assert len(orders) > 1, "seed 5 gives different arm orders in its blocks"
    assert experiment.status == Experiment.Status.FINISHED


def test_one_server_per_arm_for_all_blocks_without_server_per_block(served, celery_dispatch):
    experiment = run_all(new_experiment(celery_dispatch, server_per_block=False))

    assert len(served.servers) == 3
    executed = [run_id for server in served.servers for run_id in server.run_ids]
    assert executed == _schedule_order(experiment, "block_position", "repetition", "level_position")
    for server in served.servers:
        runs = served.runs_of(server)
        assert len({run.arm_id for run in runs}) == 1
        assert [(run.repetition, run.level_position) for run in runs] == [
            (block, level) for block in (1, 2, 3) for level in (1, 2)
        ]


def _starts(served: Served) -> dict[int, float | None]:
    """{run id: its recorded server start-up}, for every run the fake servers ran."""
    ran = [run_id for server in served.servers for run_id in server.run_ids]
    return dict(Run.objects.filter(id__in=ran).values_list("id", "server_start_s"))


def test_each_server_records_its_start_up_on_the_first_run_it_ran(served, celery_dispatch):
    run_all(new_experiment(celery_dispatch))

    starts = _starts(served)
    for number, server in enumerate(served.servers, start=1):
        first, *others = server.run_ids
        assert starts[first] == 10.0 * number
        assert [starts[run_id] for run_id in others] == [None]


def test_a_start_up_goes_on_the_first_run_the_session_claims_when_another_worker_took_its_first(
    served, celery_dispatch, monkeypatch
):
    experiment = stored_before_blocks(new_experiment(celery_dispatch))
    sessions = runner.experiment_sessions(experiment)
    taken = sessions[0].runs[0]

    def listed_then_claimed_elsewhere(experiment):
        assert execution.run_claim(run_id=taken.id, worker_host="host-2")
        return sessions

    monkeypatch.setattr(runner, "experiment_sessions", listed_then_claimed_elsewhere)
    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")

    taken.refresh_from_db()
    assert taken.server_start_s is None
    assert served.servers[0].run_ids == [sessions[0].runs[1].id]
    assert _starts(served)[sessions[0].runs[1].id] == 10.0


def test_a_server_that_died_is_replaced_and_its_replacement_records_its_own_start(served, celery_dispatch, monkeypatch):
    experiment = new_experiment(celery_dispatch, aa_replicate=False, repetitions=1)
    first, second = runner.experiment_sessions(experiment)[0].runs
    # The first server dies under the second run; the first run was stored before.
    monkeypatch.setattr(
        FakeServer, "exit_code", lambda server: 9 if server is served.servers[0] and len(server.run_ids) == 2 else None
    )

    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")

    first.refresh_from_db()
    second.refresh_from_db()
    assert served.servers[1].run_ids == [second.id]
    assert (first.server_start_s, second.server_start_s) == (10.0, 20.0)
    assert (second.status, second.attempts) == (Run.Status.SUCCEEDED, 2)


def test_a_run_claimed_again_after_its_server_died_keeps_that_servers_start_too(served, celery_dispatch, monkeypatch):
    experiment = new_experiment(celery_dispatch, aa_replicate=False, repetitions=1)
    first = runner.experiment_sessions(experiment)[0].runs[0]
    monkeypatch.setattr(FakeServer, "exit_code", lambda server: 9 if server is served.servers[0] else None)

    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")

    first.refresh_from_db()
    assert served.servers[1].run_ids[0] == first.id
    assert first.server_start_s == 10.0 + 20.0  # both starts held the devices on its behalf


@pytest.mark.parametrize("server_per_block", [True, False])
def test_a_suffix_arm_gets_a_fresh_server_for_every_run(served, celery_dispatch, server_per_block):
    experiment = run_all(
        new_experiment(celery_dispatch, arms=(NGRAM, SUFFIX), aa_replicate=False, server_per_block=server_per_block)
    )

    suffix_servers = [s for s in served.servers if served.runs_of(s)[0].arm.method == Arm.Method.SUFFIX]
    assert len(suffix_servers) == 3 * 2  # blocks x levels
    assert all(len(server.run_ids) == 1 for server in suffix_servers)
    ngram_servers = [s for s in served.servers if served.runs_of(s)[0].arm.method == Arm.Method.NGRAM]
    assert {len(server.run_ids) for server in ngram_servers} == ({2} if server_per_block else {6})
    assert experiment.status == Experiment.Status.FINISHED


def test_a_server_that_does_not_start_fails_its_session_only(served, celery_dispatch):
    experiment = new_experiment(celery_dispatch, aa_replicate=False)
    ngram = experiment.arms.get(method=Arm.Method.NGRAM)
    served.fail_when = lambda name: name.startswith(f"arm-{ngram.position}-{ngram.id}-block-2-")

    experiment = run_all(experiment)

    failed = list(experiment.runs.filter(status=Run.Status.FAILED))
    assert {(run.arm_id, run.repetition) for run in failed} == {(ngram.id, 2)}
    assert len(failed) == 2
    for run in failed:
        # The reason, then the log's end once (the exception's own text carries it too).
        assert run.error.startswith("The vLLM server did not start: vLLM server exited with code 1")
        assert run.error.count("CUDA out of nowhere") == 1
    assert all(run.started_at and run.finished_at for run in failed)
    assert experiment.runs.filter(status=Run.Status.SUCCEEDED).count() == 2 * 3 * 2 - 2
    assert experiment.status == Experiment.Status.FINISHED


def test_every_run_sends_the_same_distinct_prompts_warmup_first(served, celery_dispatch):
    experiment = run_all(new_experiment(celery_dispatch))

    expected = experiment_prompts(experiment)
    assert len(set(expected)) == len(expected) == 2 + 4
    loads = [load for server in served.servers for load in server.loads]
    assert all(load["prompts"] == expected and load["warmup"] == 2 for load in loads)
    for run in experiment.runs.all():
        rows = RequestRecord.objects.filter(run=run).order_by("prompt_index")
        assert list(rows.values_list("prompt_index", flat=True)) == [2, 3, 4, 5]


def test_each_runs_environment_records_what_its_servers_log_said_vllm_decided(served, celery_dispatch):
    # Two of a CPU server's start-up lines, as tests/workers/server/test_engine_report.py quotes them.
    served.log_text = (
        "(APIServer pid=7) WARNING 12-02 16:40:01 [vllm.py:726] Model Runner V2 requires Triton; using the V1 "
        "model runner instead.\n(EngineCore pid=8) INFO 12-02 16:40:12 [kv_cache_utils.py:2328] CPU KV cache size: "
        "87,296 tokens, Maximum concurrency for 512 tokens per request: 170.50x\n"
    )

    experiment = run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False))

    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment)
    assert snapshots.count() == experiment.runs.count()
    assert {(s.model_runner, s.async_scheduling, s.cuda_graphs, s.kv_cache_tokens) for s in snapshots} == {
        ("V1", False, "", 87_296)
    }


def test_an_experiment_whose_prompts_cannot_be_made_fails_its_runs(served, celery_dispatch):
    experiment = new_experiment(celery_dispatch, repetitions=1, aa_replicate=False)
    Experiment.objects.filter(id=experiment.id).update(num_prompts=1000)

    experiment = run_all(experiment)

    assert served.servers == []
    assert experiment.status == Experiment.Status.FAILED
    assert {run.error.split(":")[0] for run in experiment.runs.all()} == {"No prompts"}


class FakePrefetch:
    """Records when the runner starts, awaits and stops the model prefetch."""

    def __init__(self, models, *, python, log_path, events):
        self.ids = [model for model in models if not model.startswith("/")]
        self.events = events

    def __enter__(self):
        self.events.append(("prefetch started", tuple(self.ids)))
        return self

    def __exit__(self, *exc_info):
        self.events.append(("prefetch stopped",))

    def wait(self, timeout_s, should_stop):
        should_stop()
        self.events.append(("prefetch awaited", timeout_s))
        return "fetched"


def test_model_files_are_fetched_while_the_first_server_starts_and_never_beside_a_measurement(
    served, celery_dispatch, monkeypatch, settings
):
    settings.SPECDASH_ALLOW_ANY_MODEL_PATH = True  # model ids are allowed on this installation
    events = []
    monkeypatch.setattr(launch, "ModelPrefetch", lambda *args, **kwargs: FakePrefetch(*args, **kwargs, events=events))
    entered, loaded = FakeServer.__enter__, sessions.run_load_sync

    def server_enter(server):
        events.append(("server started", server.args[server.args.index("--model") + 1]))
        return entered(server)

    def load(**kwargs):
        events.append(("measured",))
        return loaded(**kwargs)

    monkeypatch.setattr(FakeServer, "__enter__", server_enter)
    monkeypatch.setattr(sessions, "run_load_sync", load)
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "org/draft-id"})
    experiment = run_all(new_experiment(celery_dispatch, arms=(draft,), aa_replicate=False, repetitions=1))

    assert experiment.status == Experiment.Status.FINISHED
    # Only the model id is fetched (the target is a path on this host), before any server starts.
    assert events[0] == ("prefetch started", ("org/draft-id",))
    assert events[1][0] == "server started"
    # Awaited on the first server, after it is healthy and before its first measured run.
    assert events[2] == ("prefetch awaited", settings.SPECDASH_MODEL_PREFETCH_TIMEOUT_S)
    assert events[3] == ("measured",)
    assert events[-1] == ("prefetch stopped",)
    assert all(event[0] != "prefetch started" for event in events[1:])
