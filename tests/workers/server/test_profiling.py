"""The worker's side of profiled intervals (workers/server/profiling.py): which sessions profile,
with which prompts and server arguments, and what a failed interval records."""

import gzip
import json
from datetime import UTC, datetime

import pytest

from experiments.models import ProfiledInterval
from tests.factories import ArmFactory, ExperimentFactory, RunFactory
from workers.measure.loadgen import LoadResult
from workers.server import profiling
from workers.server.command import profiler_args

pytestmark = pytest.mark.django_db


def test_only_the_last_block_profiles_and_only_when_asked():
    experiment = ExperimentFactory(repetitions=2, concurrency_levels=[1, 4], profile_intervals=True)
    arm = ArmFactory(experiment=experiment)
    first = [RunFactory(arm=arm, concurrency=level, repetition=1) for level in (4, 1)]
    last = [RunFactory(arm=arm, concurrency=level, repetition=2) for level in (4, 1)]
    assert profiling.profiled_levels(experiment, first) == []
    assert profiling.profiled_levels(experiment, last) == [4, 1]  # in the session's order
    assert profiling.profiled_levels(experiment, first + last) == [4, 1]  # one server for all blocks
    synthetic = [RunFactory(arm=arm, concurrency=4, repetition=2, synthetic_acceptance_length=2.0)]
    assert profiling.profiled_levels(experiment, synthetic) == []
    experiment.profile_intervals = False
    assert profiling.profiled_levels(experiment, last) == []


def test_an_interval_sends_a_full_batch_of_measured_prompts():
    prompts = [f"p{i}" for i in range(10)]
    assert profiling.interval_prompts(prompts, warmup=2, level=1) == ["p2", "p3", "p4", "p5"]
    assert profiling.interval_prompts(prompts, warmup=2, level=6) == ["p2", "p3", "p4", "p5", "p6", "p7"]
    assert profiling.interval_prompts(prompts, warmup=8, level=4) == ["p8", "p9"]


def test_the_server_writes_gzipped_engine_traces_without_stacks(tmp_path):
    flag, config = profiler_args(tmp_path)
    assert flag == "--profiler-config"
    assert json.loads(config) == {
        "profiler": "torch", "torch_profiler_dir": str(tmp_path), "ignore_frontend": True,
        "torch_profiler_with_stack": False, "torch_profiler_dump_cuda_time_total": False,
    }  # fmt: skip


def test_an_interval_that_fails_is_recorded_with_its_error(monkeypatch, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    experiment = ExperimentFactory(profile_intervals=True, warmup_requests=0)
    arm = ArmFactory(experiment=experiment)

    def refused(base_url, *, prefix, load_args):
        raise ConnectionRefusedError("no server")

    monkeypatch.setattr(profiling, "profiled_load", refused)
    profiling.session_profile("http://127.0.0.1:9", experiment, arm, [2], ["a", "b", "c", "d", "e"])
    interval = ProfiledInterval.objects.get(arm=arm)
    assert (interval.concurrency, interval.requests, interval.share_verifying) == (2, 4, None)
    assert interval.error == "ConnectionRefusedError: no server"
    # A retried session does not profile the level again.
    profiling.session_profile("http://127.0.0.1:9", experiment, arm, [2], ["a"])
    assert ProfiledInterval.objects.filter(arm=arm).count() == 1


def test_an_interval_on_a_runner_without_phase_scopes_is_stored_not_split(monkeypatch, settings, tmp_path):
    """A trace with steps and none of the V1 runner's scopes (vLLM 0.32's V2 runner on GPU) keeps
    its steps, profiled time and path; its shares stay empty and the error says why."""
    settings.DATA_DIR = tmp_path
    experiment = ExperimentFactory(profile_intervals=True, warmup_requests=0)
    arm = ArmFactory(experiment=experiment)
    directory = profiling.profile_dir(experiment, arm)

    def steps_only(base_url, *, prefix, load_args):
        directory.mkdir(parents=True)
        step = {"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_1(1)", "ts": 0, "dur": 9}
        with gzip.open(directory / f"{prefix}_rank0.pt.trace.json.gz", "wt") as trace:
            json.dump({"traceEvents": [step]}, trace)
        now = datetime.now(UTC)
        return LoadResult(requests=[], duration_s=1.5, started_at=now, finished_at=now)

    monkeypatch.setattr(profiling, "profiled_load", steps_only)
    profiling.session_profile("http://127.0.0.1:9", experiment, arm, [1], ["a", "b", "c", "d"])
    interval = ProfiledInterval.objects.get(arm=arm)
    assert interval.error.startswith("not split on this model runner: the traces hold 1 engine steps")
    assert (interval.steps, interval.profiled_ms, interval.duration_s) == (1, pytest.approx(0.009), 1.5)
    assert interval.trace_path.endswith("_rank0.pt.trace.json.gz")
    assert interval.trace_bytes > 0
    assert (interval.share_proposing, interval.share_verifying, interval.share_sampling, interval.share_other) == (
        None, None, None, None,
    )  # fmt: skip
