"""The comparison's difference rules on hand-made pairs: every listed difference triggers on
its own, and like with like gives none."""

import dataclasses

import pytest

from experiments.measurement.stats.differences import RULES, Protocol, alike, differences, shared_levels

BASE = Protocol(
    label="#1 chat on 0.32",
    target_model="/models/llama-8b",
    dtype="bfloat16",
    max_model_len=4096,
    worker_queue="h100",
    requested_vllm_version="",
    vllm_versions=("0.32.0",),
    runtime=("torch 2.13.0 · Python 3.11.2 · driver 550.54 · CUDA 12.4",),
    hardware=("1 × NVIDIA H100 80GB HBM3",),
    hosts=("gpu-7",),
    cpu_binding=(),
    workload="prompt set chat",
    prompt_set_hash="a" * 64,
    num_prompts=128,
    warmup_requests=2,
    max_tokens=256,
    ignore_eos=False,
    temperature=0.0,
    top_p=1.0,
    seed=0,
    request_rate=None,
    concurrency_levels=(1, 4, 16),
    repetitions=3,
    server_per_block=True,
    tensor_parallel_size=1,
    server_settings="vLLM's defaults",
    aa_replicate=True,
    draft_calibration=False,
    equivalence_margin=0.02,
    slos=("TPOT ≤ 50 ms",),
)

# One changed field per case, and the rule it must trigger.
CHANGES = [
    ("target_model", {"target_model": "/models/qwen-7b"}),
    ("dtype", {"dtype": "float16"}),
    ("max_model_len", {"max_model_len": 8192}),
    ("server_settings", {"server_settings": "max_num_seqs 64 · max_num_batched_tokens 8192"}),
    ("requested_vllm_version", {"requested_vllm_version": "0.33.0"}),
    ("vllm_versions", {"vllm_versions": ("0.33.0",)}),
    ("vllm_versions", {"vllm_versions": ()}),  # not run yet: cannot be called the same
    ("runtime", {"runtime": ("torch 2.14.0 · Python 3.11.2 · driver 550.54 · CUDA 12.4",)}),
    ("worker_queue", {"worker_queue": "a100"}),
    ("hardware", {"hardware": ("1 × NVIDIA A100-SXM4-80GB",)}),
    ("hosts", {"hosts": ("gpu-9",)}),
    ("cpu_binding", {"cpu_binding": ("engine on cores 1-3, client on [0]",)}),
    ("workload", {"workload": "prompt set code_edit"}),
    ("prompt_set_hash", {"prompt_set_hash": "b" * 64}),
    ("num_prompts", {"num_prompts": 64}),
    ("warmup_requests", {"warmup_requests": 8}),
    ("max_tokens", {"max_tokens": 128}),
    ("ignore_eos", {"ignore_eos": True}),
    ("sampling", {"temperature": 0.7}),
    ("sampling", {"top_p": 0.9}),
    ("seed", {"seed": 1}),
    ("request_rate", {"request_rate": 4.0}),
    ("concurrency_levels", {"concurrency_levels": (1, 4, 32)}),
    ("repetitions", {"repetitions": 5}),
    ("server_per_block", {"server_per_block": False}),
    ("tensor_parallel_size", {"tensor_parallel_size": 2}),
    ("aa_replicate", {"aa_replicate": False}),
    ("draft_calibration", {"draft_calibration": True}),
    ("equivalence_margin", {"equivalence_margin": 0.05}),
    ("slos", {"slos": ()}),
]


@pytest.mark.parametrize(("key", "change"), CHANGES, ids=[f"{key}-{next(iter(change))}" for key, change in CHANGES])
def test_each_difference_triggers_alone(key, change):
    other = dataclasses.replace(BASE, label="#2 re-run", **change)

    found = differences([BASE, other])

    assert [d.key for d in found] == [key]
    assert found[0].values[0] != found[0].values[1]
    assert found[0].consequence


def test_every_rule_has_a_case():
    assert {key for key, _ in CHANGES} == set(RULES)


def test_like_with_like_has_no_difference_and_everything_alike():
    twin = dataclasses.replace(BASE, label="#2 the same again")

    assert differences([BASE, twin]) == []
    assert alike([BASE, twin]) == [label for label, _, _ in RULES.values()]


def test_three_experiments_differ_where_any_one_does():
    newer = dataclasses.replace(BASE, label="#2", vllm_versions=("0.33.0",))
    other_pool = dataclasses.replace(BASE, label="#3", hardware=("1 × NVIDIA L4",), hosts=("l4-1",))

    found = {d.key: d.values for d in differences([BASE, newer, other_pool])}

    assert found == {
        "vllm_versions": ("0.32.0", "0.33.0", "0.32.0"),
        "hardware": ("1 × NVIDIA H100 80GB HBM3", "1 × NVIDIA H100 80GB HBM3", "1 × NVIDIA L4"),
        "hosts": ("gpu-7", "gpu-7", "l4-1"),
    }


def test_values_read_plainly():
    other = dataclasses.replace(BASE, temperature=0.7, request_rate=2.5, equivalence_margin=0.05, vllm_versions=())

    shown = {d.key: d.values for d in differences([BASE, other])}

    assert shown["sampling"] == ("greedy: temperature 0, top-p 1", "sampled: temperature 0.7, top-p 1")
    assert shown["request_rate"] == ("as fast as concurrency allows", "Poisson, 2.5 req/s")
    assert shown["equivalence_margin"] == ("2.0%", "5.0%")
    assert shown["vllm_versions"] == ("0.32.0", "not recorded")


def test_shared_levels_are_those_every_experiment_measured():
    other = dataclasses.replace(BASE, concurrency_levels=(1, 8, 16, 64))

    assert shared_levels([BASE, other]) == [1, 16]
