"""`check_guardrails` through a real vLLM server's /metrics: one n-gram server on the demo target
for the module, a rules file exported the way a decision's is, and requests sent while the
command's window is open. A rule fires when its threshold is above what the server does and is
OK when below; what the server does is read from the first check's own output."""

import json
import urllib.request
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from experiments.management.commands import check_guardrails
from experiments.measurement.deploy import guardrails
from experiments.measurement.deploy.guardrails import Counts, Deployment, Measured
from workers.server.affinity import server_env
from workers.server.command import ServerLaunch, build_server_args, free_port
from workers.server.vllm_server import VllmServer

pytestmark = pytest.mark.vllm

TARGET = settings.SPECDASH_MODELS_DIR / "target"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
DEPLOYMENT = Deployment(decision=1, service="chat", arm="n-gram k=3", positions=3, max_concurrency=4, metric="TPOT")
# Prompts that repeat themselves, so that the n-gram lookup finds drafts.
PROMPTS = [f"def f{i}(x):\n    return x + {i}\n\ndef f{i}(x):\n    return x" for i in range(4)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not (TARGET / "config.json").exists():
        pytest.skip("demo models not built (./dev test builds them)")
    args = build_server_args(
        python=settings.SPECDASH_VLLM_PYTHON, model=str(TARGET), port=free_port(), dtype="float32",
        max_model_len=512, seed=0, speculative_config=NGRAM,
        kv_cache_bytes=round(settings.SPECDASH_CPU_KVCACHE_GIB * 2**30),
    )  # fmt: skip
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    env = server_env(None, fork_engine=settings.SPECDASH_CPU_FORK_ENGINE)
    with VllmServer(ServerLaunch(args, log_path=log_path, env=env)) as s:
        yield s


def _send_requests(base_url: str) -> None:
    for prompt in PROMPTS:
        body = json.dumps({"model": "target", "prompt": prompt, "max_tokens": 48, "temperature": 0}).encode()
        request = urllib.request.Request(
            f"{base_url}/v1/completions", body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()


def _check(server, monkeypatch, tmp_path, capsys, counts: Counts) -> tuple[int, dict[str, list[str]]]:
    """Export rules whose thresholds `counts` sets, run the check with the requests sent in its
    window; (exit code, each rule's printed columns)."""
    measured = [Measured(1, DEPLOYMENT.arm, 1, (1,), guardrails.ALL_PROMPTS, counts)]
    rules = tmp_path / "guardrails.yaml"
    rules.write_text(guardrails.rules_file(DEPLOYMENT, measured, []))
    monkeypatch.setattr(check_guardrails, "time", SimpleNamespace(sleep=lambda _: _send_requests(server.base_url)))
    code = 0
    try:
        call_command("check_guardrails", rules=str(rules), metrics_url=f"{server.base_url}/metrics", window=1)
    except CommandError as error:
        code = error.returncode
    rows = capsys.readouterr().out.splitlines()[1:-1]
    return code, {row.split()[0]: row.split()[1:] for row in rows}


def test_the_check_fires_above_what_the_server_does_and_is_ok_below(server, monkeypatch, tmp_path, capsys):
    # Every draft token accepted in the measured block: thresholds of 100 %.
    code, rows = _check(server, monkeypatch, tmp_path, capsys, Counts(10, 30, 30, (10, 10, 10)))

    assert code == 1
    live = float(rows["SpeculativeAcceptanceLow"][0])
    assert 0 < live < 1
    assert rows["SpeculativeAcceptanceLow"][1:] == ["<", "1", "FIRING"]
    assert rows["SpeculativeAcceptanceLowAtPosition0"][-1] == "FIRING"
    assert rows["SpeculativeConcurrencyAboveDecision"] == ["0", ">", "4", "OK"]

    # A measured block at half the live rate: the same requests, the same greedy outputs, stay above it.
    half = Counts(1000, 1000, round(500 * live))
    code, rows = _check(server, monkeypatch, tmp_path, capsys, half)

    assert code == 0
    assert rows["SpeculativeAcceptanceLow"][0] == f"{live:.4g}"
    assert rows["SpeculativeAcceptanceLow"][-1] == "OK"
    assert set(rows) == {"SpeculativeAcceptanceLow", "SpeculativeConcurrencyAboveDecision"}
