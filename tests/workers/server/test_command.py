"""The vLLM server's command line (workers/server/command.py): flags, switches and ports."""

import json
import socket
from pathlib import Path

import pytest

from workers.server import command
from workers.server.command import ServerLaunch, build_server_args, free_port, model_paths

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def _args(**overrides):
    kwargs = {
        "python": "/venv/bin/python", "model": "/models/target", "port": 18771, "dtype": "float32",
        "max_model_len": 512, "seed": 7, "speculative_config": None, "enforce_eager": False,
    }  # fmt: skip
    return build_server_args(**{**kwargs, **overrides})


def _value(args, flag):
    return args[args.index(flag) + 1]


def test_baseline_args():
    args = _args()
    assert args[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _value(args, "--model") == "/models/target"
    assert _value(args, "--served-model-name") == "target"
    assert (_value(args, "--host"), _value(args, "--port")) == ("127.0.0.1", "18771")
    assert (_value(args, "--dtype"), _value(args, "--max-model-len"), _value(args, "--seed")) == ("float32", "512", "7")
    assert "--no-enable-prefix-caching" in args
    assert "--speculative-config" not in args
    assert "--per-request-spec-decode-metrics" not in args
    assert "--enforce-eager" not in args
    assert "--kv-cache-memory-bytes" not in args
    assert "--enable-per-request-metrics" in args  # the engine's decode time, for every arm
    assert all(isinstance(arg, str) for arg in args)


def test_tensor_parallel_size_is_passed_above_one():
    assert "--tensor-parallel-size" not in _args(tensor_parallel_size=1)
    assert _value(_args(tensor_parallel_size=4), "--tensor-parallel-size") == "4"


def test_kv_cache_size_in_bytes():
    assert _value(_args(kv_cache_bytes=6_000_000), "--kv-cache-memory-bytes") == "6000000"


def test_only_the_server_settings_that_are_set_are_passed():
    args = _args(
        engine_settings={
            "gpu_memory_utilization": 0.85, "max_num_seqs": 64, "max_num_batched_tokens": None,
            "kv_cache_dtype": "fp8", "quantization": "",
        }
    )  # fmt: skip
    assert _value(args, "--gpu-memory-utilization") == "0.85"
    assert _value(args, "--max-num-seqs") == "64"
    assert _value(args, "--kv-cache-dtype") == "fp8"
    assert "--max-num-batched-tokens" not in args
    assert "--quantization" not in args


def test_no_server_settings_leave_every_one_to_vllm():
    flags = {"--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype"}
    assert not flags & set(_args())
    assert not flags & set(_args(engine_settings={}))


def test_speculative_args_carry_the_config_as_json():
    args = _args(speculative_config=NGRAM, served_model_name="arm-1")
    assert json.loads(_value(args, "--speculative-config")) == NGRAM
    assert _value(args, "--per-request-spec-decode-metrics") == "detailed"
    assert _value(args, "--served-model-name") == "arm-1"


def test_enforce_eager_and_prefix_caching_switches():
    assert "--enforce-eager" in _args(enforce_eager=True)
    assert "--enable-prefix-caching" in _args(prefix_caching=True)


def test_enforce_eager_defaults_to_cpu_only(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "--enforce-eager" in _args(enforce_eager=None)
    monkeypatch.setattr(command, "cuda_visible", lambda python=None: True)
    assert "--enforce-eager" not in _args(enforce_eager=None)  # a GPU keeps its CUDA graphs


@pytest.mark.parametrize("gpu", [True, False])
def test_an_explicit_enforce_eager_wins_on_any_host(monkeypatch, gpu):
    monkeypatch.setattr(command, "cuda_visible", lambda python=None: gpu)
    assert "--enforce-eager" in _args(enforce_eager=True)
    assert "--enforce-eager" not in _args(enforce_eager=False)


def test_free_port_skips_a_taken_candidate():
    taken = free_port()
    with socket.create_server(("127.0.0.1", taken)):
        other = free_port([taken, *range(18770, 18780)])
        assert other != taken
    assert free_port() > 0


def test_a_launch_reads_its_port_and_a_command_its_models():
    args = _args(speculative_config={"method": "draft_model", "model": "/models/draft", "num_speculative_tokens": 3})
    assert ServerLaunch(args, log_path=Path("server.log")).port == 18771
    assert model_paths(args) == ["/models/target", "/models/draft"]
    assert model_paths(_args(speculative_config=NGRAM)) == ["/models/target"]
