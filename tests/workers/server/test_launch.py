"""What each session's server is launched with (workers/server/launch.py), as the runner launches
it with the fake server of tests/workers/fakes.py: the models, the server settings, the CPU
binding and placement, the environment, the start time-out of its queue, and the checks that
refuse a launch before any server starts.
"""

import json
import os

import pytest

from experiments.definition.services import ArmSpec
from experiments.models import Arm, EnvironmentSnapshot, Experiment, Run
from tests.workers.fakes import NGRAM, SUFFIX, Served, new_experiment, run_all
from workers import runner
from workers.server import launch, method_support
from workers.server.affinity import core_list, plan_binding

pytestmark = pytest.mark.django_db


def test_a_calibration_arm_serves_the_draft_model_alone(served, celery_dispatch, settings):
    settings.SPECDASH_ALLOW_ANY_MODEL_PATH = True
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "/models/draft"})
    experiment = run_all(
        new_experiment(celery_dispatch, arms=(draft,), aa_replicate=False, repetitions=1, draft_calibration=True)
    )

    assert experiment.status == Experiment.Status.FINISHED
    by_arm = {served.runs_of(server)[0].arm.label: server.args for server in served.servers}
    calibration = by_arm["calibration: draft model alone (draft)"]
    assert calibration[calibration.index("--model") + 1] == "/models/draft"
    assert "--speculative-config" not in calibration
    speculative = by_arm["Draft model k=3"]
    assert speculative[speculative.index("--model") + 1] == experiment.target_model
    assert "--speculative-config" in speculative


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_cpu_hosts_bind_the_engine_and_pin_the_client_while_measuring(served, celery_dispatch, settings):
    settings.SPECDASH_CPU_KVCACHE_GIB = 0.5
    cores = sorted(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)

    experiment = run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False))

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
    monkeypatch.setattr(launch, "cuda_visible", lambda python=None: True)
    before = os.sched_getaffinity(0)

    experiment = run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False))

    assert all(server.env == {} for server in served.servers)
    assert all(load["cores"] == before for server in served.servers for load in server.loads)
    assert all(s.cpu_binding == {} for s in EnvironmentSnapshot.objects.filter(run__experiment=experiment))


def test_cpu_servers_fork_their_processes_unless_told_not_to(served, celery_dispatch, settings):
    run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False))
    settings.SPECDASH_CPU_FORK_ENGINE = False
    run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False))

    methods = [server.env.get("VLLM_WORKER_MULTIPROC_METHOD") for server in served.servers]
    assert methods == ["fork", "fork", None, None]
    assert all(server.env["VLLM_CPU_KVCACHE_SPACE"] is None for server in served.servers)


def test_a_worker_with_too_few_gpus_fails_a_tensor_parallel_experiment_before_any_server(
    served, celery_dispatch, monkeypatch
):
    monkeypatch.setattr(launch, "cuda_visible", lambda python=None: True)
    monkeypatch.setattr(launch, "gpu_info", lambda python=None: {"gpu_count": 2})
    experiment = run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False, tensor_parallel_size=4))

    assert served.servers == []
    assert experiment.status == Experiment.Status.FAILED
    errors = set(experiment.runs.values_list("error", flat=True))
    assert errors == {
        "Tensor parallel size 4 needs a worker that sees 4 GPUs; this one sees 2. Send the experiment to a queue "
        "whose workers each own that many (docs/gpu-hosts.md)."
    }


def test_a_worker_with_enough_gpus_starts_servers_across_them(served, celery_dispatch, monkeypatch):
    monkeypatch.setattr(launch, "cuda_visible", lambda python=None: True)
    monkeypatch.setattr(launch, "gpu_info", lambda python=None: {"gpu_count": 4})
    experiment = run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False, tensor_parallel_size=4))

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
    experiment = run_all(
        new_experiment(
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


def test_the_models_an_experiments_servers_load_are_listed_in_session_order(celery_dispatch):
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "org/draft-id"})
    experiment = new_experiment(
        celery_dispatch, arms=(draft,), aa_replicate=False, repetitions=1, draft_calibration=True
    )

    models = launch.experiment_models(experiment, [session.arm for session in runner.experiment_sessions(experiment)])

    # The baseline and calibration servers load one model each, the draft arm's two.
    assert sorted(set(models)) == sorted({experiment.target_model, "org/draft-id"})
    assert models.count("org/draft-id") == 2


def test_a_worker_refuses_a_model_its_settings_do_not_allow_before_any_server(served, celery_dispatch, settings):
    # Submitted where any path was allowed (or run again after the rule changed): this
    # worker's settings keep models inside its models folder.
    outside = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "/etc/draft"})
    experiment = run_all(new_experiment(celery_dispatch, arms=(outside,), aa_replicate=False, repetitions=1))

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
    on_cpu = run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False))
    on_h100 = run_all(new_experiment(celery_dispatch, repetitions=1, aa_replicate=False, worker_queue="h100"))

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
    experiment = run_all(new_experiment(celery_dispatch, arms=(NGRAM, SUFFIX), aa_replicate=False, repetitions=1))

    for run in _refused_before_any_server(experiment, served, Arm.Method.SUFFIX):
        assert "suffix decoding needs arctic-inference" in run.error
        assert "No module named 'arctic_inference'" in run.error
        assert f"{settings.SPECDASH_VLLM_PYTHON} -m pip install arctic-inference==0.1.1" in run.error
    assert experiment.runs.filter(arm__method=Arm.Method.NGRAM, status=Run.Status.SUCCEEDED).count() == 2


def test_a_worker_without_a_gpu_fails_ngram_gpu_runs_before_any_server(served, celery_dispatch, monkeypatch):
    monkeypatch.setattr(method_support, "cuda_visible", lambda python=None: False)
    ngram_gpu = ArmSpec(method=Arm.Method.NGRAM_GPU, num_speculative_tokens=4, params={"prompt_lookup_min": 2})
    experiment = run_all(new_experiment(celery_dispatch, arms=(NGRAM, ngram_gpu), aa_replicate=False, repetitions=1))

    for run in _refused_before_any_server(experiment, served, Arm.Method.NGRAM_GPU):
        assert "ngram_gpu runs its n-gram lookup on a GPU, and this worker has none" in run.error
        assert "Last lines of its log" not in run.error


def test_a_gpu_worker_starts_ngram_gpu_servers(served, celery_dispatch, monkeypatch):
    monkeypatch.setattr(method_support, "cuda_visible", lambda python=None: True)
    ngram_gpu = ArmSpec(method=Arm.Method.NGRAM_GPU, num_speculative_tokens=4, params={"prompt_lookup_min": 2})
    experiment = run_all(new_experiment(celery_dispatch, arms=(ngram_gpu,), aa_replicate=False, repetitions=1))

    assert experiment.status == Experiment.Status.FINISHED
    assert experiment.runs.filter(status=Run.Status.SUCCEEDED).count() == 4


def test_a_session_launch_holds_its_log_pid_folder_time_out_placement_and_profiler(
    celery_dispatch, settings, monkeypatch, tmp_path
):
    settings.DATA_DIR = tmp_path
    settings.SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE = {"h100": 1800.0}
    monkeypatch.setattr(launch, "cuda_visible", lambda python=None: False)
    experiment = new_experiment(celery_dispatch, repetitions=1, aa_replicate=False, worker_queue="h100")
    arm = experiment.arms.get(method=Arm.Method.NGRAM)
    host = launch.ServerHost(pid_dir=launch.server_pid_dir("cpu@here"), binding=plan_binding([0, 1]))

    plain = launch.session_launch(host, experiment, arm, name="arm-2-block-1")
    profiled = launch.session_launch(host, experiment, arm, name="arm-2-block-1", profiled=True)

    assert plain.log_path == tmp_path / "server-logs" / f"experiment-{experiment.id}" / "arm-2-block-1.log"
    assert plain.log_path.parent.is_dir()
    assert plain.pid_dir == tmp_path / "server-pids" / "cpu@here"
    assert plain.start_timeout_s == 1800.0
    assert (plain.placement.binding, plain.placement.mode) == (host.binding, "split")
    assert plain.env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert plain.args[plain.args.index("--port") + 1] == str(plain.port)
    assert "--profiler-config" not in plain.args
    assert "VLLM_CUSTOM_SCOPES_FOR_PROFILING" not in plain.env
    assert "--profiler-config" in profiled.args
    assert profiled.env["VLLM_CUSTOM_SCOPES_FOR_PROFILING"] == "1"


def test_an_experiments_own_kv_cache_size_replaces_the_cpu_workers(served, celery_dispatch, settings):
    """The flag once, with the experiment's bytes, for every arm; the worker's SPECDASH_CPU_KVCACHE_GIB not."""
    settings.SPECDASH_ALLOW_ANY_MODEL_PATH = True
    experiment = run_all(
        new_experiment(celery_dispatch, arms=(NGRAM,), repetitions=1, kv_cache_memory_bytes=12_000_000)
    )

    assert experiment.status == Experiment.Status.FINISHED
    for server in served.servers:
        assert server.args.count("--kv-cache-memory-bytes") == 1
        assert server.args[server.args.index("--kv-cache-memory-bytes") + 1] == "12000000"
