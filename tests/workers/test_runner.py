"""The runner's order of work, with fakes for the vLLM server and the load generator.

The database, services, schedule and ingestion are real; only the server process and the
HTTP load are replaced, so these tests check which runs share a server, in what order
they run, and what reaches the server and the load generator.
"""

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import services as execution
from experiments.models import Arm, EnvironmentSnapshot, Experiment, RequestRecord, Run
from experiments.prompts.catalog import experiment_prompts
from tests.factories import UserFactory, experiment_fields
from workers import runner
from workers.measure.loadgen import LoadResult, RequestResult
from workers.measure.prom import SpecCounters
from workers.server import method_support
from workers.server.affinity import core_list
from workers.server.vllm_server import ServerStartError

pytestmark = pytest.mark.django_db

NGRAM = ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=4, params={"prompt_lookup_min": 2})
SUFFIX = ArmSpec(method=Arm.Method.SUFFIX, num_speculative_tokens=8)


@dataclass
class Served:
    """What the fakes saw: servers in start order, and the runs each one served."""

    servers: list["FakeServer"] = field(default_factory=list)
    fail_when: object = None  # a predicate on the server's log path: fail that start
    log_text: str = ""  # what each server writes to its log as it starts

    def runs_of(self, server: "FakeServer") -> list[Run]:
        return [Run.objects.get(id=run_id) for run_id in server.run_ids]


class FakeServer:
    served: Served

    def __init__(self, args, *, log_path, env, start_timeout_s, pid_dir, placement, stop_check):
        self.args, self.log_path, self.env, self.placement = args, log_path, env, placement
        self.stop_check, self.start_timeout_s = stop_check, start_timeout_s
        # What VllmServer.placed holds once the placement is applied to a healthy server.
        self.placed = {}
        self.run_ids: list[int] = []
        self.loads: list[dict] = []
        self.running = False
        self.served.servers.append(self)
        self.base_url = f"http://fake-{len(self.served.servers)}"

    def __enter__(self):
        self.stop_check()  # VllmServer calls it between health checks while the server starts
        if self.served.fail_when and self.served.fail_when(self.log_path.name):
            raise ServerStartError("vLLM server exited with code 1 before it became healthy", "CUDA out of nowhere")
        self.log_path.write_text(self.served.log_text)
        self.running = True
        # What VllmServer.start_s holds once it answers /health: the n-th server took 10·n s.
        self.start_s = 10.0 * len(self.served.servers)
        if self.placement is not None:
            front, engine_core = self.placement.cores()
            self.placed = {"api_server": sorted(front), "engine_core": sorted(engine_core)}
        return self

    def __exit__(self, *exc_info):
        self.running = False

    def log_tail(self) -> str:
        return ""

    def exit_code(self) -> int | None:
        return None


def _fake_load(served: Served):
    def run_load_sync(*, base_url, prompts, warmup, concurrency, on_request_done, **kwargs) -> LoadResult:
        server = next(s for s in served.servers if s.base_url == base_url)
        assert server.running
        server.run_ids.append(on_request_done.run.id)
        server.loads.append(
            {"prompts": prompts, "warmup": warmup, "concurrency": concurrency, "cores": os.sched_getaffinity(0)}
        )
        now = datetime.now(UTC)
        requests = [
            RequestResult(
                prompt_index=index, input_tokens=5, output_tokens=2, ttft_ms=10.0, e2e_ms=30.0, tpot_ms=20.0,
                chunk_times_ms=[10.0, 30.0], chunk_tokens=[1, 1], output_token_ids=[7, 8], finish_reason="length",
            )
            for index in range(warmup, len(prompts))
        ]  # fmt: skip
        return LoadResult(requests, 1.0, now, now, SpecCounters(0, 0, 0, []))

    return run_load_sync


def _fake_environment(*, vllm_python: str, server_command: list[str], cpu_binding: dict, engine: dict) -> dict:
    return {"host_name": "h", "server_command": server_command, "cpu_binding": cpu_binding, **engine}


@pytest.fixture
def served(monkeypatch, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    served = Served()
    monkeypatch.setattr(FakeServer, "served", served, raising=False)
    monkeypatch.setattr(runner, "VllmServer", FakeServer)
    monkeypatch.setattr(runner, "run_load_sync", _fake_load(served))
    monkeypatch.setattr(runner, "capture_environment", _fake_environment)
    monkeypatch.setattr(runner, "cuda_visible", lambda python=None: False)
    monkeypatch.setattr(method_support, "arctic_inference_error", lambda python: None)
    return served


def _experiment(celery_dispatch, arms=(NGRAM,), **fields) -> Experiment:
    protocol = {
        "num_prompts": 4, "max_tokens": 8, "concurrency_levels": [1, 4], "repetitions": 3, "warmup_requests": 2,
        "aa_replicate": True, "seed": 5,
    }  # fmt: skip
    return definition.experiment_create(owner=UserFactory(), arms=list(arms), **experiment_fields(**protocol | fields))


def _run_all(experiment: Experiment) -> Experiment:
    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")
    experiment.refresh_from_db()
    return experiment


def _schedule_order(experiment: Experiment, *order: str) -> list[int]:
    return list(experiment.runs.order_by(*order).values_list("id", flat=True))


def test_no_server_starts_for_a_session_whose_runs_were_all_taken_meanwhile(served, celery_dispatch, monkeypatch):
    experiment = _experiment(celery_dispatch)
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
    experiment = _run_all(_experiment(celery_dispatch))

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
    experiment = _run_all(_experiment(celery_dispatch))

    first_arm_per_block = [served.runs_of(server)[0] for server in served.servers[::3]]
    orders = {
        tuple(served.runs_of(server)[0].arm_id for server in served.servers[block * 3 : block * 3 + 3])
        for block in range(3)
    }
    assert [run.repetition for run in first_arm_per_block] == [1, 2, 3]
    assert len(orders) > 1, "seed 5 gives different arm orders in its blocks"
    assert experiment.status == Experiment.Status.FINISHED


def test_one_server_per_arm_for_all_blocks_without_server_per_block(served, celery_dispatch):
    experiment = _run_all(_experiment(celery_dispatch, server_per_block=False))

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
    _run_all(_experiment(celery_dispatch))

    starts = _starts(served)
    for number, server in enumerate(served.servers, start=1):
        first, *others = server.run_ids
        assert starts[first] == 10.0 * number
        assert [starts[run_id] for run_id in others] == [None]


def test_a_start_up_goes_on_the_first_run_the_session_claims_when_another_worker_took_its_first(
    served, celery_dispatch, monkeypatch
):
    experiment = _experiment(celery_dispatch)
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
    experiment = _experiment(celery_dispatch, aa_replicate=False, repetitions=1)
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
    experiment = _experiment(celery_dispatch, aa_replicate=False, repetitions=1)
    first = runner.experiment_sessions(experiment)[0].runs[0]
    monkeypatch.setattr(FakeServer, "exit_code", lambda server: 9 if server is served.servers[0] else None)

    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")

    first.refresh_from_db()
    assert served.servers[1].run_ids[0] == first.id
    assert first.server_start_s == 10.0 + 20.0  # both starts held the devices on its behalf


@pytest.mark.parametrize("server_per_block", [True, False])
def test_a_suffix_arm_gets_a_fresh_server_for_every_run(served, celery_dispatch, server_per_block):
    experiment = _run_all(
        _experiment(celery_dispatch, arms=(NGRAM, SUFFIX), aa_replicate=False, server_per_block=server_per_block)
    )

    suffix_servers = [s for s in served.servers if served.runs_of(s)[0].arm.method == Arm.Method.SUFFIX]
    assert len(suffix_servers) == 3 * 2  # blocks x levels
    assert all(len(server.run_ids) == 1 for server in suffix_servers)
    ngram_servers = [s for s in served.servers if served.runs_of(s)[0].arm.method == Arm.Method.NGRAM]
    assert {len(server.run_ids) for server in ngram_servers} == ({2} if server_per_block else {6})
    assert experiment.status == Experiment.Status.FINISHED


def test_a_calibration_arm_serves_the_draft_model_alone(served, celery_dispatch, settings):
    settings.SPECDASH_ALLOW_ANY_MODEL_PATH = True
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "/models/draft"})
    experiment = _run_all(
        _experiment(celery_dispatch, arms=(draft,), aa_replicate=False, repetitions=1, draft_calibration=True)
    )

    assert experiment.status == Experiment.Status.FINISHED
    by_arm = {served.runs_of(server)[0].arm.label: server.args for server in served.servers}
    calibration = by_arm["calibration: draft model alone (draft)"]
    assert calibration[calibration.index("--model") + 1] == "/models/draft"
    assert "--speculative-config" not in calibration
    speculative = by_arm["Draft model k=3"]
    assert speculative[speculative.index("--model") + 1] == experiment.target_model
    assert "--speculative-config" in speculative


def test_a_server_that_does_not_start_fails_its_session_only(served, celery_dispatch):
    experiment = _experiment(celery_dispatch, aa_replicate=False)
    ngram = experiment.arms.get(method=Arm.Method.NGRAM)
    served.fail_when = lambda name: name.startswith(f"arm-{ngram.position}-{ngram.id}-block-2-")

    experiment = _run_all(experiment)

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
    experiment = _run_all(_experiment(celery_dispatch))

    expected = experiment_prompts(experiment)
    assert len(set(expected)) == len(expected) == 2 + 4
    loads = [load for server in served.servers for load in server.loads]
    assert all(load["prompts"] == expected and load["warmup"] == 2 for load in loads)
    for run in experiment.runs.all():
        rows = RequestRecord.objects.filter(run=run).order_by("prompt_index")
        assert list(rows.values_list("prompt_index", flat=True)) == [2, 3, 4, 5]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_cpu_hosts_bind_the_engine_and_pin_the_client_while_measuring(served, celery_dispatch, settings):
    settings.SPECDASH_CPU_KVCACHE_GIB = 0.5
    cores = sorted(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)

    experiment = _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False))

    engine = core_list(cores[1:])
    for server in served.servers:
        # The cache's size as a flag, which takes fractions of a GiB; vLLM's whole-GiB variable,
        # which would override it, is kept out of the server's environment.
        assert server.env == {
            "VLLM_CPU_KVCACHE_SPACE": None, "VLLM_WORKER_MULTIPROC_METHOD": "fork", "VLLM_CPU_OMP_THREADS_BIND": engine
        }  # fmt: skip
        assert server.args[server.args.index("--kv-cache-memory-bytes") + 1] == str(2**29)
        assert all(load["cores"] == {cores[0]} for load in server.loads)
    assert os.sched_getaffinity(0) == before
    snapshot = EnvironmentSnapshot.objects.filter(run__experiment=experiment).first()
    # The API server on the client's core, the busy-waiting engine core with the engine's threads.
    assert all(server.placement.mode == "split" for server in served.servers)
    assert snapshot.cpu_binding == {
        "engine_cores": engine,
        "client_cores": [cores[0]],
        "env": {"VLLM_CPU_OMP_THREADS_BIND": engine},
        "placement": {"api_server": [cores[0]], "engine_core": cores[1:]},
    }


def test_gpu_hosts_set_no_cpu_binding(served, celery_dispatch, monkeypatch):
    monkeypatch.setattr(runner, "cuda_visible", lambda python=None: True)
    before = os.sched_getaffinity(0)

    experiment = _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False))

    assert all(server.env == {} for server in served.servers)
    assert all(load["cores"] == before for server in served.servers for load in server.loads)
    assert all(s.cpu_binding == {} for s in EnvironmentSnapshot.objects.filter(run__experiment=experiment))


def test_each_runs_environment_records_what_its_servers_log_said_vllm_decided(served, celery_dispatch):
    # Two of a CPU server's start-up lines, as tests/workers/test_engine_report.py quotes them.
    served.log_text = (
        "(APIServer pid=7) WARNING 12-02 16:40:01 [vllm.py:726] Model Runner V2 requires Triton; using the V1 "
        "model runner instead.\n(EngineCore pid=8) INFO 12-02 16:40:12 [kv_cache_utils.py:2328] CPU KV cache size: "
        "87,296 tokens, Maximum concurrency for 512 tokens per request: 170.50x\n"
    )

    experiment = _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False))

    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment)
    assert snapshots.count() == experiment.runs.count()
    assert {(s.model_runner, s.async_scheduling, s.cuda_graphs, s.kv_cache_tokens) for s in snapshots} == {
        ("V1", False, "", 87_296)
    }


def test_cpu_servers_fork_their_processes_unless_told_not_to(served, celery_dispatch, settings):
    _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False))
    settings.SPECDASH_CPU_FORK_ENGINE = False
    _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False))

    methods = [server.env.get("VLLM_WORKER_MULTIPROC_METHOD") for server in served.servers]
    assert methods == ["fork", "fork", None, None]
    assert all(server.env["VLLM_CPU_KVCACHE_SPACE"] is None for server in served.servers)


def test_a_worker_with_too_few_gpus_fails_a_tensor_parallel_experiment_before_any_server(
    served, celery_dispatch, monkeypatch
):
    monkeypatch.setattr(runner, "cuda_visible", lambda python=None: True)
    monkeypatch.setattr(runner, "gpu_info", lambda python=None: {"gpu_count": 2})
    experiment = _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False, tensor_parallel_size=4))

    assert served.servers == []
    assert experiment.status == Experiment.Status.FAILED
    errors = set(experiment.runs.values_list("error", flat=True))
    assert errors == {
        "Tensor parallel size 4 needs a worker that sees 4 GPUs; this one sees 2. Send the experiment to a queue "
        "whose workers each own that many (docs/gpu-hosts.md)."
    }


def test_a_worker_with_enough_gpus_starts_servers_across_them(served, celery_dispatch, monkeypatch):
    monkeypatch.setattr(runner, "cuda_visible", lambda python=None: True)
    monkeypatch.setattr(runner, "gpu_info", lambda python=None: {"gpu_count": 4})
    experiment = _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False, tensor_parallel_size=4))

    assert experiment.status == Experiment.Status.FINISHED
    assert [server.args[server.args.index("--tensor-parallel-size") + 1] for server in served.servers] == ["4", "4"]


def test_every_server_of_an_experiment_starts_with_its_server_settings(served, celery_dispatch, settings):
    """The baseline, the replicate, the arms and the calibration arm alike: the settings are the
    experiment's. A draft's own tensor parallel size goes into its arm's config only."""
    settings.SPECDASH_ALLOW_ANY_MODEL_PATH = True
    draft = ArmSpec(
        method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3,
        params={"model": "/models/draft", "draft_tensor_parallel_size": 1},
    )  # fmt: skip
    experiment = _run_all(
        _experiment(
            celery_dispatch, arms=(NGRAM, draft), repetitions=1, draft_calibration=True,
            max_num_seqs=4, max_num_batched_tokens=1024, kv_cache_dtype="auto",
        )
    )  # fmt: skip

    assert experiment.status == Experiment.Status.FINISHED
    assert len(served.servers) == 5
    for server in served.servers:
        flags = server.args[server.args.index("--max-num-seqs") :]
        assert flags[:6] == ["--max-num-seqs", "4", "--max-num-batched-tokens", "1024", "--kv-cache-dtype", "auto"]
        assert "--gpu-memory-utilization" not in server.args
        assert "--quantization" not in server.args
    configs = [
        json.loads(s.args[s.args.index("--speculative-config") + 1])
        for s in served.servers
        if "--speculative-config" in s.args
    ]
    assert sorted(config.get("draft_tensor_parallel_size", 0) for config in configs) == [0, 1]


def test_an_experiment_whose_prompts_cannot_be_made_fails_its_runs(served, celery_dispatch):
    experiment = _experiment(celery_dispatch, repetitions=1, aa_replicate=False)
    Experiment.objects.filter(id=experiment.id).update(num_prompts=1000)

    experiment = _run_all(experiment)

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
    monkeypatch.setattr(runner, "ModelPrefetch", lambda *args, **kwargs: FakePrefetch(*args, **kwargs, events=events))
    entered, loaded = FakeServer.__enter__, runner.run_load_sync

    def server_enter(server):
        events.append(("server started", server.args[server.args.index("--model") + 1]))
        return entered(server)

    def load(**kwargs):
        events.append(("measured",))
        return loaded(**kwargs)

    monkeypatch.setattr(FakeServer, "__enter__", server_enter)
    monkeypatch.setattr(runner, "run_load_sync", load)
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "org/draft-id"})
    experiment = _run_all(_experiment(celery_dispatch, arms=(draft,), aa_replicate=False, repetitions=1))

    assert experiment.status == Experiment.Status.FINISHED
    # Only the model id is fetched (the target is a path on this host), before any server starts.
    assert events[0] == ("prefetch started", ("org/draft-id",))
    assert events[1][0] == "server started"
    # Awaited on the first server, after it is healthy and before its first measured run.
    assert events[2] == ("prefetch awaited", settings.SPECDASH_MODEL_PREFETCH_TIMEOUT_S)
    assert events[3] == ("measured",)
    assert events[-1] == ("prefetch stopped",)
    assert all(event[0] != "prefetch started" for event in events[1:])


def test_the_models_an_experiments_servers_load_are_listed_in_session_order(celery_dispatch):
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "org/draft-id"})
    experiment = _experiment(celery_dispatch, arms=(draft,), aa_replicate=False, repetitions=1, draft_calibration=True)

    models = runner.experiment_models(experiment, runner.experiment_sessions(experiment))

    # The baseline and calibration servers load one model each, the draft arm's two.
    assert sorted(set(models)) == sorted({experiment.target_model, "org/draft-id"})
    assert models.count("org/draft-id") == 2


def test_a_worker_refuses_a_model_its_settings_do_not_allow_before_any_server(served, celery_dispatch, settings):
    # Submitted where any path was allowed (or run again after the rule changed): this
    # worker's settings keep models inside its models folder.
    outside = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "/etc/draft"})
    experiment = _run_all(_experiment(celery_dispatch, arms=(outside,), aa_replicate=False, repetitions=1))

    arm = experiment.arms.get(method=Arm.Method.DRAFT_MODEL)
    started = {served.runs_of(server)[0].arm_id for server in served.servers}
    assert arm.id not in started
    assert len(started) == 1  # the baseline ran
    for run in experiment.runs.filter(arm=arm):
        assert run.status == Run.Status.FAILED
        assert "This worker does not load /etc/draft" in run.error
        assert "SPECDASH_ALLOW_ANY_MODEL_PATH" in run.error
        assert "Last lines of its log" not in run.error


def test_each_server_waits_as_long_as_its_queue_allows(celery_dispatch, served, settings):
    settings.SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE = {"h100": 1800.0}
    on_cpu = _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False))
    on_h100 = _run_all(_experiment(celery_dispatch, repetitions=1, aa_replicate=False, worker_queue="h100"))

    assert on_cpu.status == on_h100.status == Experiment.Status.FINISHED
    timeouts = [server.start_timeout_s for server in served.servers]
    assert timeouts == [settings.SPECDASH_SERVER_START_TIMEOUT_S] * 2 + [1800.0] * 2


# The probe itself, before the `served` fixture replaces it with a host that has arctic-inference.
ARCTIC_INFERENCE_ERROR = method_support.arctic_inference_error


def _refused_before_any_server(experiment: Experiment, served: Served, method: str) -> list[Run]:
    arm = experiment.arms.get(method=method)
    assert arm.id not in {served.runs_of(server)[0].arm_id for server in served.servers}
    runs = list(experiment.runs.filter(arm=arm))
    assert runs
    assert all(run.status == Run.Status.FAILED for run in runs)
    return runs


def test_suffix_runs_fail_before_any_server_where_the_vllm_environment_lacks_arctic_inference(
    served, celery_dispatch, monkeypatch, settings
):
    """This host's CPU vLLM environment has no arctic-inference: the worker asks it, starts no
    server for the suffix arm, and fails its runs with the fix; the other arms run."""
    monkeypatch.setattr(method_support, "arctic_inference_error", ARCTIC_INFERENCE_ERROR)
    experiment = _run_all(_experiment(celery_dispatch, arms=(NGRAM, SUFFIX), aa_replicate=False, repetitions=1))

    for run in _refused_before_any_server(experiment, served, Arm.Method.SUFFIX):
        assert "suffix decoding needs arctic-inference" in run.error
        assert "No module named 'arctic_inference'" in run.error
        assert f"{settings.SPECDASH_VLLM_PYTHON} -m pip install arctic-inference==0.1.1" in run.error
    assert experiment.runs.filter(arm__method=Arm.Method.NGRAM, status=Run.Status.SUCCEEDED).count() == 2


def test_a_worker_without_a_gpu_fails_ngram_gpu_runs_before_any_server(served, celery_dispatch, monkeypatch):
    monkeypatch.setattr(method_support, "cuda_visible", lambda python=None: False)
    ngram_gpu = ArmSpec(method=Arm.Method.NGRAM_GPU, num_speculative_tokens=4, params={"prompt_lookup_min": 2})
    experiment = _run_all(_experiment(celery_dispatch, arms=(NGRAM, ngram_gpu), aa_replicate=False, repetitions=1))

    for run in _refused_before_any_server(experiment, served, Arm.Method.NGRAM_GPU):
        assert "ngram_gpu runs its n-gram lookup on a GPU, and this worker has none" in run.error
        assert "Last lines of its log" not in run.error


def test_a_gpu_worker_starts_ngram_gpu_servers(served, celery_dispatch, monkeypatch):
    monkeypatch.setattr(method_support, "cuda_visible", lambda python=None: True)
    ngram_gpu = ArmSpec(method=Arm.Method.NGRAM_GPU, num_speculative_tokens=4, params={"prompt_lookup_min": 2})
    experiment = _run_all(_experiment(celery_dispatch, arms=(ngram_gpu,), aa_replicate=False, repetitions=1))

    assert experiment.status == Experiment.Status.FINISHED
    assert experiment.runs.filter(status=Run.Status.SUCCEEDED).count() == 4
