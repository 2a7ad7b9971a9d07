"""What a worker asks its vLLM environment before it starts a server for a method
(workers/server/method_support.py): stand-in vLLM interpreters with and without
arctic-inference, this host's real CPU vLLM environment (which has none), and ngram_gpu on a
host with and without a GPU."""

import sys
from pathlib import Path

import pytest
from django.conf import settings

from workers.server import method_support
from workers.server.method_support import MethodUnsupported

REQUIREMENTS = Path(__file__).resolve().parents[3] / "requirements" / "vllm-gpu.txt"


def _stand_in_python(tmp_path: Path, *, with_arctic_inference: bool) -> str:
    """An interpreter as the worker calls it: this test's Python, with a package of the
    module vLLM imports for suffix decoding on its path, or without one."""
    if with_arctic_inference:
        package = tmp_path / "site" / "arctic_inference" / "suffix_decoding"
        package.mkdir(parents=True)
        (package.parent / "__init__.py").write_text("")
        (package / "__init__.py").write_text("class SuffixDecodingCache:\n    pass\n")
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_suffix_is_refused_with_the_fix_where_arctic_inference_is_missing(tmp_path):
    python = _stand_in_python(tmp_path, with_arctic_inference=False)

    reason = method_support.unsupported_reason("suffix", python)

    assert reason is not None
    assert "No module named 'arctic_inference'" in reason
    assert f"{python} -m pip install arctic-inference==0.1.1" in reason
    with pytest.raises(MethodUnsupported, match="suffix decoding needs arctic-inference"):
        method_support.check("suffix", python)


def test_suffix_runs_where_the_vllm_environment_imports_arctic_inference(tmp_path):
    python = _stand_in_python(tmp_path, with_arctic_inference=True)

    assert method_support.unsupported_reason("suffix", python) is None
    method_support.check("suffix", python)


@pytest.mark.vllm
def test_this_hosts_cpu_vllm_environment_has_no_arctic_inference():
    reason = method_support.unsupported_reason("suffix", settings.SPECDASH_VLLM_PYTHON)

    assert reason is not None
    assert "No module named 'arctic_inference'" in reason


def test_the_environment_is_asked_once_per_interpreter(tmp_path, monkeypatch):
    python = _stand_in_python(tmp_path, with_arctic_inference=False)
    asked = []
    real_run = method_support.subprocess.run
    monkeypatch.setattr(method_support.subprocess, "run", lambda *a, **k: asked.append(a) or real_run(*a, **k))

    for _ in range(3):
        method_support.unsupported_reason("suffix", python)

    assert len(asked) == 1


def test_an_interpreter_that_cannot_be_asked_leaves_the_verdict_to_the_server(tmp_path):
    assert method_support.unsupported_reason("suffix", str(tmp_path / "no-such-python")) is None


@pytest.mark.parametrize(("gpu", "refused"), [(False, True), (True, False)])
def test_ngram_gpu_needs_a_gpu(monkeypatch, gpu, refused):
    monkeypatch.setattr(method_support, "cuda_visible", lambda python=None: gpu)

    reason = method_support.unsupported_reason("ngram_gpu", "python")

    assert (reason is not None) == refused
    if refused:
        assert "use ngram on CPU workers" in reason


@pytest.mark.parametrize("method", ["ngram", "draft_model", "eagle", "eagle3", "mtp", "baseline"])
def test_other_methods_ask_nothing(monkeypatch, method):
    monkeypatch.setattr(method_support, "cuda_visible", lambda python=None: False)
    monkeypatch.setattr(method_support.subprocess, "run", lambda *a, **k: pytest.fail("asked the environment"))

    assert method_support.unsupported_reason(method, "python") is None


def test_the_version_named_in_the_fix_is_the_one_the_gpu_requirements_pin():
    pins = [line.strip() for line in REQUIREMENTS.read_text().splitlines() if line.startswith("arctic-inference")]

    assert pins == [method_support.ARCTIC_INFERENCE]
