"""Fakes for the vLLM server and the load generator, for the tests that run the worker's runner
(workers/runner.py) on the real database, services, schedule and ingestion: the `served`
fixture puts them in place and records what each server was launched with and ran."""

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import fleet_capacity
from experiments.measurement.engine.prom import SpecCounters
from experiments.models import Arm, Experiment, Run
from tests.factories import UserFactory, experiment_fields
from workers import runner, sessions
from workers.host import fingerprint
from workers.measure.loadgen import LoadResult, RequestResult
from workers.server import launch, method_support
from workers.server.vllm_server import ServerStartError

NGRAM = ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=4, params={"prompt_lookup_min": 2})
SUFFIX = ArmSpec(method=Arm.Method.SUFFIX, num_speculative_tokens=8)
# The hardware class every fake worker reports (workers/host/fingerprint.py), unless a test says otherwise.
FAKE_HARDWARE = {
    "gpu_name": "",
    "gpu_count": 0,
    "gpu_driver": "",
    "vllm_version": "0.32.0",
    "torch_version": "2.13.0",
    "cpu_model": "Fake CPU",
}


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

    def __init__(self, launch, *, stop_check):
        self.launch, self.stop_check = launch, stop_check
        self.args, self.log_path, self.env, self.placement = launch.args, launch.log_path, launch.env, launch.placement
        self.start_timeout_s = launch.start_timeout_s
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


def fake_load(served: Served):
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


def fake_environment(*, vllm_python: str, server_command: list[str], cpu_binding: dict, engine: dict) -> dict:
    return {"host_name": "h", "server_command": server_command, "cpu_binding": cpu_binding, **engine}


@pytest.fixture
def served(monkeypatch, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    served = Served()
    monkeypatch.setattr(FakeServer, "served", served, raising=False)
    monkeypatch.setattr(sessions, "VllmServer", FakeServer)
    monkeypatch.setattr(sessions, "run_load_sync", fake_load(served))
    monkeypatch.setattr(sessions, "capture_environment", fake_environment)
    monkeypatch.setattr(fingerprint, "worker_fingerprint", lambda python: FAKE_HARDWARE)
    monkeypatch.setattr(fleet_capacity, "class_capacity", lambda **asked: 1)
    monkeypatch.setattr(launch, "cuda_visible", lambda python=None: False)
    monkeypatch.setattr(method_support, "arctic_inference_error", lambda python: None)
    return served


def new_experiment(celery_dispatch, arms=(NGRAM,), **fields) -> Experiment:
    protocol = {
        "num_prompts": 4, "max_tokens": 8, "concurrency_levels": [1, 4], "repetitions": 3, "warmup_requests": 2,
        "aa_replicate": True, "seed": 5,
    }  # fmt: skip
    return definition.experiment_create(owner=UserFactory(), arms=list(arms), **experiment_fields(**protocol | fields))


def run_all(experiment: Experiment) -> Experiment:
    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")
    experiment.refresh_from_db()
    return experiment


def stored_before_blocks(experiment: Experiment) -> Experiment:
    """The experiment as one stored before its blocks were dispatched one by one (no Block rows):
    one worker holds it whole (workers/runner.py)."""
    experiment.blocks.all().delete()
    return experiment
