"""factory_boy factories for the specdash tables."""

import factory
from django.conf import settings
from django.contrib.auth import get_user_model

from experiments.models import Arm, Experiment, RequestRecord, Run, RunSummary

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
