"""factory_boy factories for the specdash tables, builders of what the services and the
experiment form take, and a finished experiment stored through the worker's own ingestion
(its requests' speculative decoding simulated by workers/bench/requests.py)."""

import json
import random

import factory
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from experiments import lifecycle, teams
from experiments.analysis.services import experiment_analyse
from experiments.definition.forms.arms import ARM_FORMSET_PREFIX
from experiments.execution import services as execution
from experiments.measurement.encoding.packed import FLOAT64
from experiments.measurement.engine import stream_fidelity
from experiments.models import (
    Arm,
    EnvironmentSnapshot,
    Experiment,
    RequestRecord,
    Run,
    RunSummary,
    ServiceProfile,
    SpeedupEstimate,
)
from workers.bench.requests import recorded, simulated_decoding, spec_counters
from workers.measure.loadgen import LoadResult, RequestResult, stream_timing
from workers.storage.ingest import ingest_run

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
    team = factory.LazyFunction(teams.default_team)
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


class ServiceProfileFactory(factory.django.DjangoModelFactory):
    """A profile of a service on the experiments' default model and queue, at concurrency 1–4."""

    class Meta:
        model = ServiceProfile

    service = factory.Sequence(lambda n: f"service-{n}")
    team = factory.LazyFunction(teams.default_team)
    owner = factory.SubFactory(UserFactory)
    target_model = factory.LazyFunction(lambda: str(settings.SPECDASH_MODELS_DIR / "target"))
    worker_queue = "cpu"
    concurrency_low = 1
    concurrency_high = 4


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


# ---------------------------------------------------------------- field values without rows


def _as_fields(factory_class, **overrides) -> dict:
    """The field values `factory_class` would give a row, as a dict, without saving anything."""
    return factory.build(dict, FACTORY_CLASS=factory_class, **overrides)


def experiment_fields(**overrides) -> dict:
    """The fields definition.experiment_create takes, as ExperimentFactory makes them."""
    fields = _as_fields(ExperimentFactory, owner=None, team=None, **overrides)
    del fields["owner"]
    if fields["team"] is None:
        del fields["team"]
    return fields


# ---------------------------------------------------------------- what the experiment form posts

NGRAM_ARM_FORM = {"method": "ngram", "num_speculative_tokens": "4", "prompt_lookup_min": "2", "prompt_lookup_max": "4"}
DRAFT_ARM_FORM = {
    "method": "draft_model", "num_speculative_tokens": "4", "model": str(settings.SPECDASH_MODELS_DIR / "draft"),
}  # fmt: skip


def form_data(arms=(NGRAM_ARM_FORM,), **overrides) -> dict:
    """What the browser posts: the experiment fields and the arm formset (None drops a field)."""
    data = {
        "name": "chat k sweep",
        "description": "",
        "target_model": str(settings.SPECDASH_MODELS_DIR / "target"),
        "worker_queue": "cpu",
        "dtype": "float32",
        "max_model_len": "512",
        "workload_kind": "builtin",
        "prompt_set": "chat",
        "synthetic_input_len": "",
        "max_tokens": "64",
        "num_prompts": "20",
        "temperature": "0",
        "top_p": "1",
        "seed": "0",
        "concurrency_levels": "1, 4",
        "repetitions": "2",
        "server_per_block": "on",
        "sequential": "on",
        "equivalence_margin": "2",
        "warmup_requests": "2",
        "request_rate": "",
        "slo_ttft_ms": "",
        "slo_tpot_ms": "",
        "slo_e2e_ms": "",
        f"{ARM_FORMSET_PREFIX}-TOTAL_FORMS": str(len(arms)),
        f"{ARM_FORMSET_PREFIX}-INITIAL_FORMS": "0",
        f"{ARM_FORMSET_PREFIX}-MIN_NUM_FORMS": "1",
        f"{ARM_FORMSET_PREFIX}-MAX_NUM_FORMS": "8",
    }
    for index, arm in enumerate(arms):
        data.update({f"{ARM_FORMSET_PREFIX}-{index}-{name}": value for name, value in arm.items()})
    data.update(overrides)
    return {name: value for name, value in data.items() if value is not None}


def experiment_with_arms(**fields) -> Experiment:
    """An experiment with its baseline and an n-gram arm, and no run."""
    experiment = ExperimentFactory(**fields)
    ArmFactory(experiment=experiment, baseline=True, position=0)
    ArmFactory(experiment=experiment, position=1, label="n-gram k=4")
    return experiment


# ---------------------------------------------------------------- a finished experiment

SEEDED_BLOCKS = 3
# (label, method, k, params, TPOT in ms at each level, chance a draft token is accepted)
SEEDED_ARMS = (
    ("baseline", Arm.Method.BASELINE, None, {}, {1: 20.0, 4: 26.0}, 0.0),
    ("n-gram k=4", Arm.Method.NGRAM, 4, {"prompt_lookup_min": 2, "prompt_lookup_max": 4}, {1: 12.0, 4: 21.0}, 0.6),
    ("draft k=3", Arm.Method.DRAFT_MODEL, 3, {"model": "/models/draft"}, {1: 15.0, 4: 29.0}, 0.5),
)
# The draft model served alone (a calibration arm): a quarter of the baseline's step, and more at 4.
SEEDED_CALIBRATION = (
    "calibration: draft model alone (draft)", Arm.Method.BASELINE, None, {"model": "/models/draft"},
    {1: 5.0, 4: 8.0}, 0.0,
)  # fmt: skip


def seeded_output(arm: Arm, prompt_index: int, output_tokens: int) -> list[int]:
    """The output token ids of a seeded request: the same for every arm, except that the draft
    arm's output for prompt 0 differs from token 5 on."""
    ids = [(prompt_index * 31 + i) % 50000 for i in range(output_tokens)]
    if arm.method == Arm.Method.DRAFT_MODEL and prompt_index == 0:
        ids[5:] = [1] * (output_tokens - 5)
    return ids


def _seed_request(rng, run, prompt_index, tpot, k, accept, output_tokens) -> RequestResult:
    ttft = rng.uniform(40, 60) * (1 + run.concurrency / 8)
    decoding = simulated_decoding(rng, k=k, accept=accept, output_tokens=output_tokens)
    tpot_ms = tpot * rng.uniform(0.85, 1.15)
    chunks = len(decoding["chunk_tokens"])
    gap = tpot_ms * (output_tokens - 1) / (chunks - 1)
    result = RequestResult(
        prompt_index=prompt_index, input_tokens=50, output_tokens=output_tokens, ttft_ms=ttft,
        e2e_ms=ttft + tpot_ms * (output_tokens - 1), tpot_ms=tpot_ms,
        chunk_times_ms=FLOAT64.new(ttft + i * gap for i in range(chunks)), finish_reason="length",
        output_token_ids=seeded_output(run.arm, prompt_index, output_tokens),
        # The engine's clock: the stream kept pace with it, 2 ms of front end before the first token.
        server_decode_ms=tpot_ms * (output_tokens - 1), server_queue_ms=0.5, server_ttft_ms=ttft - 2.5,
        **recorded(decoding),
    )  # fmt: skip
    # As the load generator's finalise() derives them (the simulated last step is not cut at
    # the output's end, so its chunks would not pass finalise's count check).
    result.server_tpot_ms = stream_fidelity.server_tpot_ms(result.server_decode_ms, output_tokens)
    result.stream = stream_fidelity.request_check(stream_timing(result))
    return result


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


def seed_calibration(experiment: Experiment, *, requests=20, output_tokens=32, seed=1) -> Experiment:
    """Add SEEDED_CALIBRATION to a seed_finished_experiment, with its runs in every block and
    level, and analyse the experiment again: its draft arm then has a measured draft cost."""
    rng = random.Random(seed)
    label, method, _, params, tpots, _ = SEEDED_CALIBRATION
    arm = ArmFactory(
        experiment=experiment, position=len(SEEDED_ARMS), label=label, method=method, num_speculative_tokens=None,
        params=params, is_calibration=True,
    )  # fmt: skip
    for repetition in range(1, experiment.repetitions + 1):
        for level in tpots:
            run = RunFactory(arm=arm, concurrency=level, repetition=repetition, status=Run.Status.SUCCEEDED)
            seed_run_results(run, rng, requests=requests, output_tokens=output_tokens)
    experiment.draft_calibration = True
    experiment.save(update_fields=["draft_calibration"])
    experiment_analyse(experiment=experiment)
    return experiment


def seed_run_results(run: Run, rng: random.Random, *, requests: int, output_tokens: int, **environment) -> None:
    """What a worker records for one run of a SEEDED_ARMS method, stored by the worker's own
    ingestion: its requests, their summary and an environment snapshot (`environment`
    overrides its fields)."""
    seeded = [SEEDED_CALIBRATION] if run.arm.is_calibration else SEEDED_ARMS
    _, _, k, _, tpots, accept = next(arm for arm in seeded if arm[1] == run.arm.method)
    results = [_seed_request(rng, run, i, tpots[run.concurrency], k, accept, output_tokens) for i in range(requests)]
    now = timezone.now()
    load = LoadResult(results, sum(r.e2e_ms for r in results) / 1000 / run.concurrency, now, now)
    snapshot = _as_fields(EnvironmentSnapshotFactory, run=run, **environment)
    del snapshot["run"]
    ingest_run(
        run_id=run.id, load=load, counters=spec_counters(results, k), environment=snapshot, experiment=run.experiment
    )


def complete_experiment(experiment: Experiment, *, seed: int, worker_host: str, **environment) -> Experiment:
    """Play the worker for an experiment made through the pages, whose arms are SEEDED_ARMS
    methods at their levels: every queued run succeeds with seeded results, then the
    experiment finishes as the worker would end it (analysis, decision check)."""
    rng = random.Random(seed)
    execution.experiment_mark_running(experiment=experiment)
    for run in experiment.runs.select_related("arm").in_execution_order(server_per_block=True):
        assert execution.run_claim(run_id=run.id, worker_host=worker_host)
        seed_run_results(
            run, rng, requests=experiment.num_prompts, output_tokens=experiment.max_tokens, host_name=worker_host,
            **environment,
        )  # fmt: skip
        execution.run_mark_succeeded(run_id=run.id)
    lifecycle.experiment_finish(experiment=experiment)
    experiment.refresh_from_db()
    return experiment
