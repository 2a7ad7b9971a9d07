"""scripts/gpu_smoke.py, the GPU path's proof (workers/bench/gpu_smoke.py): on a host without a
GPU the GPU-only checks are reported as skipped by name and never as passed; on a GPU the
engine's decisions are held to what the GPU path needs; the command line's exit status follows
the checks; and one real run on this CPU machine (one n-gram server on the demo pair) passes
every check a CPU can answer, its V1 profile split."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from scripts import gpu_smoke as command_line
from workers.bench import gpu_smoke
from workers.bench.gpu_smoke import FAIL, PASS, SKIP, Options, Server, Smoke
from workers.server.engine_report import EngineReport

ROOT = Path(__file__).resolve().parents[3]
MODELS = settings.SPECDASH_MODELS_DIR


def _smoke(tmp_path: Path, *, gpu: bool) -> tuple[Smoke, list[str]]:
    said: list[str] = []
    return Smoke(Options(vllm_python=sys.executable, work_dir=tmp_path), gpu=gpu, say=said.append), said


def test_the_servers_cover_every_method_and_name_the_gpu_only_ones(tmp_path):
    cpu = gpu_smoke.servers(tmp_path, gpu=False)
    methods = {(s.speculative or {}).get("method", "baseline") for s in cpu}
    assert methods == {"baseline", "draft_model", "suffix", "ngram", "ngram_gpu"}
    assert {s.name for s in cpu if s.gpu_only} == {"n-gram on the GPU", "synthetic acceptance"}
    synthetic = next(s for s in cpu if s.name == "synthetic acceptance").speculative
    assert synthetic["rejection_sample_method"] == "synthetic"
    # The GPU profiles V2 on the baseline and V1 on the suffix arm; a CPU (all V1) profiles the n-gram arm.
    assert {s.name: s.profile for s in gpu_smoke.servers(tmp_path, gpu=True) if s.profile} == {
        "baseline": "V2", "suffix": "V1"}  # fmt: skip
    assert {s.name: s.profile for s in cpu if s.profile} == {"n-gram": "V1"}


def test_a_gpu_only_check_on_a_cpu_host_is_skipped_by_name_and_starts_no_server(tmp_path, monkeypatch):
    def no_server(*args, **kwargs):
        raise AssertionError("a GPU-only server was started on a CPU host")

    monkeypatch.setattr(gpu_smoke, "VllmServer", no_server)
    smoke, said = _smoke(tmp_path, gpu=False)
    gpu_smoke.serve(smoke, Server("n-gram on the GPU", {"method": "ngram_gpu"}, gpu_only=True), tmp_path)
    gpu_smoke.memory_refusal(smoke, tmp_path)
    assert [c.status for c in smoke.checks] == [SKIP, SKIP]
    assert said[0].startswith("skip n-gram on the GPU: server: GPU-only")
    assert "memory refusal" in said[1]
    assert not smoke.failed
    assert gpu_smoke.summary(smoke) == "0 passed, 0 failed, 2 skipped"


def test_on_a_gpu_the_engine_must_run_the_expected_runner_with_graphs_and_flashinfer(tmp_path):
    smoke, _ = _smoke(tmp_path, gpu=True)
    fine = EngineReport(model_runner="V2", async_scheduling=True, cuda_graphs="FULL_AND_PIECEWISE", kv_cache_tokens=9)
    gpu_smoke.engine_checks(smoke, Server("baseline", None, runner="V2"), fine)
    assert [c.status for c in smoke.checks] == [PASS] * 4
    smoke, _ = _smoke(tmp_path, gpu=True)
    wrong = EngineReport(model_runner="V1", cuda_graphs="off", kv_cache_tokens=9, flashinfer="disabled")
    gpu_smoke.engine_checks(smoke, Server("baseline", None, runner="V2"), wrong)
    assert {c.name: c.status for c in smoke.checks} == {
        "baseline: what vLLM decided": PASS,
        "baseline: model runner V2": FAIL,
        "baseline: CUDA graphs captured": FAIL,
        "baseline: FlashInfer kernels": FAIL,
    }
    assert smoke.failed


def test_a_cpu_host_expects_vllms_cpu_build_eager_on_v1_and_an_unread_log_fails(tmp_path):
    smoke, _ = _smoke(tmp_path, gpu=False)
    gpu_smoke.engine_checks(smoke, Server("n-gram", {}), EngineReport(model_runner="V1", cuda_graphs="off"))
    # No KV-cache line: vLLM's decisions were not all read.
    assert [c.status for c in smoke.checks] == [FAIL, PASS]


@pytest.mark.parametrize(("statuses", "code"), [((PASS, SKIP), 0), ((PASS, FAIL, SKIP), 1)])
def test_the_command_line_exits_1_exactly_when_a_check_failed(statuses, code, monkeypatch, tmp_path, capsys):
    def run(options: Options) -> Smoke:
        assert options.only == ("n-gram",)
        assert options.work_dir == tmp_path
        smoke, _ = _smoke(tmp_path, gpu=False)
        for status in statuses:
            smoke.add("a check", status)
        return smoke

    monkeypatch.setattr(gpu_smoke, "run", run)
    assert command_line.main(["--only", "n-gram", "--work-dir", str(tmp_path)]) == code
    assert capsys.readouterr().out.strip().endswith("skipped")


def test_the_guides_command_is_the_command_lines(monkeypatch):
    """docs/gpu-hosts.md step 8 runs `python -m scripts.gpu_smoke` with options it accepts."""
    guide = (ROOT / "docs" / "gpu-hosts.md").read_text()
    line = re.search(r"^\s*\.venv/bin/python -m scripts\.gpu_smoke(.*)$", guide, re.M)
    assert line is not None
    asked: list[Options] = []

    def run(options: Options) -> Smoke:
        asked.append(options)
        return Smoke(options, gpu=False)

    monkeypatch.setattr(gpu_smoke, "run", run)
    assert command_line.main(shlex.split(line.group(1))) == 0
    assert asked[0].work_dir == Path("/var/cache/specdash/gpu-smoke")


@pytest.mark.vllm
def test_on_this_cpu_machine_the_n_gram_server_passes_every_check_a_cpu_can_answer(tmp_path):
    if not (MODELS / "target" / "config.json").exists():
        pytest.skip("demo models not built (./dev test builds them)")
    done = subprocess.run(
        [sys.executable, "-m", "scripts.gpu_smoke", "--only", "n-gram", "--models", str(MODELS),
         "--vllm-python", str(settings.SPECDASH_VLLM_PYTHON), "--work-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [line for line in lines if line.startswith(FAIL)]
    passed = {line.split(":", 2)[1].strip() for line in lines if line.startswith("pass n-gram:")}
    assert passed == {
        "server", "what vLLM decided", "CPU build eager on V1", "requests", "per-request engine metrics",
        "spec counters", "per-request spec metrics", "V1 profile splits",
    }  # fmt: skip
    assert any(line.startswith("skip second server on a full GPU") for line in lines)
    assert lines[-1] == "10 passed, 0 failed, 1 skipped"
