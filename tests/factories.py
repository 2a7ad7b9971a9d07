"""factory_boy factories for the specdash tables, and a finished experiment made with them."""

import json
import random
import struct

import factory
from django.conf import settings
from django.contrib.auth import get_user_model

from experiments import services, stats
from experiments.analysis import experiment_analyse
from experiments.models import (
    Arm,
    EnvironmentSnapshot,
    Experiment,
    RequestRecord,
    Run,
    RunSummary,
    SpeedupEstimate,
)
from workers.ingest import meets_slos

PASSWORD = "correct horse battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    password = factory.django.Password(PASSWORD)


class ExperimentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Experiment

    name = factory.Sequence(lambda n: f"experiment {n}")
    owner = factory.SubFactory(UserFactory)
    target_model = factory.LazyFunction(lambda: str(settings.SPECDASH_MODELS_DIR / "target"))
    worker_queue = "cpu"
    dtype = "float32"
    max_model_len = 512
    workload_kind = Experiment.WorkloadKind.BUILTIN
    prompt_set = "chat"
    prompt_set_hash = "0" * 64
    num_prompts = 8
    max_tokens = 32
    concurrency_levels = factory.LazyFunction(lambda: [1, 4])


class ArmFactory(factory.django.DjangoModelFactory):
    """A speculative n-gram arm; use `baseline=True` for the baseline."""

    class Meta:
        model = Arm

    class Params:
        baseline = factory.Trait(method=Arm.Method.BASELINE, num_speculative_tokens=None, params={}, label="baseline")

    experiment = factory.SubFactory(ExperimentFactory)
    position = factory.Sequence(lambda n: n + 1)
    label = factory.Sequence(lambda n: f"n-gram {n}")
    method = Arm.Method.NGRAM
    num_speculative_tokens = 4
    params = factory.LazyFunction(lambda: {"prompt_lookup_min": 2, "prompt_lookup_max": 4})


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    arm = factory.SubFactory(ArmFactory)
    experiment = factory.SelfAttribute("arm.experiment")
    concurrency = factory.Sequence(lambda n: n + 1)
    repetition = 1


class RunSummaryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RunSummary

    run = factory.SubFactory(RunFactory, status=Run.Status.SUCCEEDED)
    duration_s = 10.0
    completed = 8
    failed = 0
    total_input_tokens = 400
    total_output_tokens = 256
    request_throughput = 0.8
    output_throughput = 25.6
    ttft_mean_ms = 50.0
    ttft_p50_ms = 48.0
    ttft_p90_ms = 60.0
    ttft_p99_ms = 70.0
    tpot_mean_ms = 20.0
    tpot_p50_ms = 19.0
    tpot_p90_ms = 24.0
    tpot_p99_ms = 30.0
    e2e_mean_ms = 700.0
    e2e_p50_ms = 690.0
    e2e_p90_ms = 800.0
    e2e_p99_ms = 900.0


class RequestRecordFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RequestRecord

    run = factory.SubFactory(RunFactory, status=Run.Status.SUCCEEDED)
    prompt_index = factory.Sequence(lambda n: n)
    input_tokens = 50
    output_tokens = 32
    sent_at_s = 0.0
    ttft_ms = 50.0
    e2e_ms = 700.0
    tpot_ms = factory.LazyAttribute(lambda r: (r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1))
    finish_reason = "length"


class EnvironmentSnapshotFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = EnvironmentSnapshot

    run = factory.SubFactory(RunFactory, status=Run.Status.SUCCEEDED)
    host_name = "cpu-worker-1"
    cpu_model = "AMD EPYC 7B13"
    cpu_count = 2
    vllm_version = "0.32.0"
    torch_version = "2.13.0+cpu"
    python_version = "3.11.2"
    server_command = factory.LazyAttribute(lambda snapshot: _server_command(snapshot.run.arm))


class SpeedupEstimateFactory(factory.django.DjangoModelFactory):
    """A stored TPOT speedup called faster; pass point, ci_low, ci_high and outcome to change it."""

    class Meta:
        model = SpeedupEstimate

    arm = factory.SubFactory(ArmFactory)
    experiment = factory.SelfAttribute("arm.experiment")
    concurrency = 1
    metric = SpeedupEstimate.Metric.TPOT
    point = 1.5
    ci_low = 1.4
    ci_high = 1.6
    n_repetitions = 3
    outcome = "faster"


def _server_command(arm: Arm) -> list[str]:
    command = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/target", "--port", "8100"]
    if arm.is_baseline:
        return command
    return [*command, "--speculative-config", json.dumps(arm.speculative_config(), sort_keys=True)]


# ---------------------------------------------------------------- a finished experiment

SEEDED_BLOCKS = 3
# (label, method, k, params, TPOT in ms at each level, chance a draft token is accepted)
SEEDED_ARMS = (
    ("baseline", Arm.Method.BASELINE, None, {}, {1: 20.0, 4: 26.0}, 0.0),
    ("n-gram k=4", Arm.Method.NGRAM, 4, {"prompt_lookup_min": 2, "prompt_lookup_max": 4}, {1: 12.0, 4: 21.0}, 0.6),
    ("draft k=3", Arm.Method.DRAFT_MODEL, 3, {"model": "/models/draft"}, {1: 15.0, 4: 29.0}, 0.5),
)


def _steps(rng, k, accept, output_tokens):
    """Accepted draft tokens per verify step until the output is covered (prefill gives token 0)."""
    accepted, index = [], 1
    while index < output_tokens:
        n = 0
        while n < k and rng.random() < accept:
            n += 1
        accepted.append(n)
        index += n + 1
    return accepted


def seeded_output(arm: Arm, prompt_index: int, output_tokens: int) -> list[int]:
    """The output token ids of a seeded request: the same for every arm, except that the draft
    arm's output for prompt 0 differs from token 5 on."""
    ids = [(prompt_index * 31 + i) % 50000 for i in range(output_tokens)]
    if arm.method == Arm.Method.DRAFT_MODEL and prompt_index == 0:
        ids[5:] = [1] * (output_tokens - 5)
    return ids


def _seed_request(rng, run, prompt_index, tpot, k, accept, output_tokens):
    ttft = rng.uniform(40, 60) * (1 + run.concurrency / 8)
    output_ids = seeded_output(run.arm, prompt_index, output_tokens)
    accepted = _steps(rng, k, accept, output_tokens) if k else None
    chunk_tokens = [1] + ([n + 1 for n in accepted] if k else [1] * (output_tokens - 1))
    tpot_ms = tpot * rng.uniform(0.85, 1.15)
    gap = tpot_ms * (output_tokens - 1) / (len(chunk_tokens) - 1)
    return RequestRecordFactory(
        run=run, prompt_index=prompt_index, output_tokens=output_tokens, ttft_ms=ttft,
        e2e_ms=ttft + tpot_ms * (output_tokens - 1), tpot_ms=tpot_ms,
        chunk_times_ms=[ttft + i * gap for i in range(len(chunk_tokens))], chunk_tokens=chunk_tokens,
        spec_accepted_per_step=accepted, spec_proposed_per_step=[k] * len(accepted) if k else None,
        spec_acceptance_length=1 + sum(accepted) / len(accepted) if k else None,
        output_token_ids=struct.pack(f"<{output_tokens}I", *output_ids),
    )  # fmt: skip


def _seed_summary(run, requests, k, duration_s):
    experiment = run.experiment
    goodput = sum(meets_slos(r, experiment) for r in requests) / duration_s if experiment.has_slos else None
    fields = {
        f"{metric}_{key}_ms": value
        for metric in ("ttft", "tpot", "e2e")
        for key, value in stats.summarise([getattr(r, f"{metric}_ms") for r in requests]).items()
    }
    gaps = [gap for r in requests for gap in stats.itl_ms(r.chunk_times_ms)]
    fields |= {f"itl_{key}_ms": value for key, value in stats.summarise(gaps).items()}
    steps = [n for r in requests for n in (r.spec_accepted_per_step or [])]
    output_tokens = sum(r.output_tokens for r in requests)
    return RunSummaryFactory(
        run=run, duration_s=duration_s, completed=len(requests), total_output_tokens=output_tokens,
        request_throughput=len(requests) / duration_s, output_throughput=output_tokens / duration_s, goodput=goodput,
        tokens_per_chunk_mean=stats.tokens_per_chunk([n for r in requests for n in r.chunk_tokens]),
        spec_num_drafts=len(steps) if k else None, spec_num_draft_tokens=len(steps) * k if k else None,
        spec_num_accepted_tokens=sum(steps) if k else None,
        spec_accepted_per_pos=[sum(n > i for n in steps) for i in range(k)] if k else None,
        **fields,
    )  # fmt: skip


def seed_finished_experiment(
    *, requests=20, repetitions=SEEDED_BLOCKS, output_tokens=32, seed=0, **fields
) -> Experiment:
    """A finished experiment of SEEDED_ARMS at concurrency 1 and 4, every run succeeded with
    `requests` requests (per-step acceptance included) and a summary computed from them,
    one environment snapshot per run, and the stored analysis."""
    rng = random.Random(seed)
    experiment = ExperimentFactory(
        status=Experiment.Status.FINISHED, concurrency_levels=[1, 4], repetitions=repetitions,
        num_prompts=requests, max_tokens=output_tokens, **fields,
    )  # fmt: skip
    for position, (label, method, k, params, tpots, _) in enumerate(SEEDED_ARMS):
        arm = ArmFactory(
            experiment=experiment, position=position, label=label, method=method, num_speculative_tokens=k,
            params=params,
        )  # fmt: skip
        for repetition in range(1, repetitions + 1):
            for level in tpots:
                run = RunFactory(
                    arm=arm, concurrency=level, repetition=repetition, status=Run.Status.SUCCEEDED,
                    worker_host="cpu-worker-1", requests_done=requests, requests_total=requests,
                )  # fmt: skip
                seed_run_results(run, rng, requests=requests, output_tokens=output_tokens)
    experiment_analyse(experiment=experiment)
    return experiment


def seed_run_results(run: Run, rng: random.Random, *, requests: int, output_tokens: int, **environment) -> None:
    """What a worker records for one run of a SEEDED_ARMS method: its requests, their summary
    and an environment snapshot (`environment` overrides its fields)."""
    _, _, k, _, tpots, accept = next(arm for arm in SEEDED_ARMS if arm[1] == run.arm.method)
    rows = [_seed_request(rng, run, i, tpots[run.concurrency], k, accept, output_tokens) for i in range(requests)]
    duration_s = sum(r.e2e_ms for r in rows) / 1000 / run.concurrency
    _seed_summary(run, rows, k, duration_s)
    EnvironmentSnapshotFactory(run=run, **environment)


def complete_experiment(experiment: Experiment, *, seed: int, worker_host: str, **environment) -> Experiment:
    """Play the worker for an experiment made through the pages, whose arms are SEEDED_ARMS
    methods at their levels: every queued run succeeds with seeded results, then the
    experiment finishes as the worker would end it (analysis, decision check)."""
    rng = random.Random(seed)
    services.experiment_mark_running(experiment=experiment)
    for run in experiment.runs.select_related("arm").in_execution_order(server_per_block=True):
        assert services.run_claim(run_id=run.id, worker_host=worker_host)
        seed_run_results(
            run, rng, requests=experiment.num_prompts, output_tokens=experiment.max_tokens, host_name=worker_host,
            **environment,
        )  # fmt: skip
        services.run_mark_succeeded(run_id=run.id)
    services.experiment_finish(experiment=experiment)
    experiment.refresh_from_db()
    return experiment
