"""The command line: experiments/api/client.py over HTTP and the submit_spec management
command, their expectations, verdict table and exit status."""

import io
import json

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from experiments.api import client as specdash_client
from experiments.api.client import HELD, NOT_HELD, REFUSED, parse_expectation
from experiments.api.payloads import results_payload
from experiments.models import Experiment
from tests.factories import seed_finished_experiment

SPEC = {
    "name": "from ci", "prompt_set": "chat", "dtype": "float32", "max_tokens": 64, "num_prompts": 20,
    "concurrency_levels": [1, 4], "repetitions": 2,
    "arms": [{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}],
}  # fmt: skip


def _command(*args, **options) -> tuple[int, str]:
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("submit_spec", *args, stdout=out, **options)
    return exit_.value.code, out.getvalue()


# ---------------------------------------------------------------- expectations


@pytest.mark.parametrize(
    ("text", "arm", "allowed", "metric", "levels_in", "levels_out"),
    [
        # No metric named: the engine-timed TPOT, which the page's verdict grid opens on.
        ("n-gram k=4 faster at concurrency <= 8", "n-gram k=4", {"faster"}, "server_tpot", [1, 8], [9]),
        (
            "draft k=3 is not slower on e2e",
            "draft k=3",
            {"faster", "equivalent", "not worth it", "inconclusive"},
            "e2e",
            [1, 64],
            [],
        ),
        # A primary cell's futility word, with its "not" inside.
        ("draft k=3 not worth it at 4", "draft k=3", {"not worth it"}, "server_tpot", [4], [1]),
        ("A faster or equivalent at ≥ 4", "A", {"faster", "equivalent"}, "server_tpot", [4, 5], [3]),
        ("A slower on output_throughput at 16", "A", {"slower"}, "output_throughput", [16], [8]),
        ("A Faster on tpot at concurrency > 2", "A", {"faster"}, "tpot", [3], [2]),
    ],
)
def test_expectations_read_arm_outcomes_metric_and_levels(text, arm, allowed, metric, levels_in, levels_out):
    expectation = parse_expectation(text)

    assert (expectation.arm, set(expectation.allowed), expectation.metric) == (arm, allowed, metric)
    assert all(expectation.applies_to(level) for level in levels_in)
    assert not any(expectation.applies_to(level) for level in levels_out)


@pytest.mark.parametrize("text", ["", "faster", "A quicker at 4", "A faster at <= eight"])
def test_an_unreadable_expectation_says_how_to_write_one(text):
    with pytest.raises(ValueError, match=r"write e\.g\."):
        parse_expectation(text)


@pytest.mark.django_db
def test_judging_reads_the_stored_verdicts():
    results = results_payload(seed_finished_experiment())
    outcome = {(s["arm_id"], s["level"], s["metric"]): s["outcome"] for s in results["speedups"]}
    draft = next(arm["id"] for arm in results["arms"] if arm["label"] == "draft k=3")
    assert (outcome[(draft, 1, "tpot")], outcome[(draft, 4, "tpot")]) == ("faster", "slower")

    held, why = specdash_client.judge(parse_expectation("draft k=3 faster at concurrency <= 1"), results)
    assert held, why
    held, why = specdash_client.judge(parse_expectation("draft k=3 faster at concurrency <= 4"), results)
    assert not held
    assert why.startswith("at 4: slower ")
    held, why = specdash_client.judge(parse_expectation("eagle k=2 faster"), results)
    assert (held, why) == (False, "no arm is labelled 'eagle k=2' (the arms: baseline, n-gram k=4, draft k=3)")
    held, why = specdash_client.judge(parse_expectation("draft k=3 faster at 64"), results)
    assert (held, why) == (False, "no measured level matches")


@pytest.mark.django_db
def test_a_gate_on_the_services_word_refuses_an_arm_that_costs_capacity():
    """The seeded draft arm is faster per token at 1; its output throughput halved, it costs
    capacity there: "pays" fails the gate, naming why; "faster" on server_tpot still holds."""
    from experiments.analysis.services import experiment_analyse
    from experiments.models import RunSummary

    guards = [{"metric": "e2e", "margin": 0.05}, {"metric": "output_throughput", "margin": 0.05}]
    experiment = seed_finished_experiment(objective="interactive", guards=guards)
    draft = experiment.arms.get(label="draft k=3")
    for summary in RunSummary.objects.filter(run__arm=draft):
        summary.output_throughput *= 0.5
        summary.save(update_fields=["output_throughput"])
    experiment_analyse(experiment=experiment)
    results = results_payload(experiment)

    held, why = specdash_client.judge(parse_expectation("draft k=3 pays at concurrency 1"), results)
    assert not held
    assert why.startswith("at 1: faster per token but costs capacity: output throughput")
    assert specdash_client.judge(parse_expectation("draft k=3 not pays at 1"), results)[0]
    assert specdash_client.judge(parse_expectation("draft k=3 faster at concurrency 1"), results)[0]
    with pytest.raises(ValueError, match="the service's words"):
        parse_expectation("draft k=3 pays on e2e")


@pytest.mark.django_db
def test_the_verdict_table_has_every_compared_arm_and_level():
    results = results_payload(seed_finished_experiment())

    table = specdash_client.verdict_table(results)

    assert "tpot speedup over the baseline" in table
    assert "baseline " not in table.replace("over the baseline", "")
    rows = [line for line in table.splitlines() if line.strip().startswith(("n-gram k=4", "draft k=3"))]
    assert len(rows) == 2 * (1 + len(specdash_client.TABLE_METRICS))  # the service's words, then each metric's
    words, figures = rows[:2], rows[2:]
    assert all(row.count("[") == 2 for row in figures)
    assert "for the service" in table
    assert all(set(row.split()[2:]) <= {"pays", "does", "not", "pay"} or "pays" in row for row in words)


# ---------------------------------------------------------------- the management command


@pytest.mark.django_db
def test_the_command_submits_a_spec_file(tmp_path, user, celery_dispatch):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))

    status, out = _command(str(path), owner="alice")

    experiment = Experiment.objects.get()
    assert (status, out) == (HELD, f"submitted experiment {experiment.pk}\n")
    assert experiment.owner == user
    assert experiment.arms.count() == 2


@pytest.mark.django_db
def test_the_command_submits_an_ngram_gpu_arm_beside_an_ngram_one(tmp_path, user, celery_dispatch):
    gpu = {**SPEC["arms"][0], "method": "ngram_gpu"}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC | {"arms": [*SPEC["arms"], gpu]}))

    status, _ = _command(str(path), owner="alice")

    assert status == HELD
    arms = Experiment.objects.get().arms.exclude(method="baseline").order_by("position")
    assert [(arm.method, arm.params) for arm in arms] == [
        ("ngram", {"prompt_lookup_min": 2, "prompt_lookup_max": 4}),
        ("ngram_gpu", {"prompt_lookup_min": 2, "prompt_lookup_max": 4}),
    ]


@pytest.mark.django_db
def test_the_command_warns_when_no_live_worker_listens_on_the_queue(tmp_path, user, celery_dispatch):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC | {"worker_queue": "h100"}))

    status, out = _command(str(path), owner="alice")

    assert status == HELD
    assert out.splitlines()[1] == "warning: No live worker listens on queue h100; the experiment waits until one joins."


@pytest.mark.django_db
def test_a_yaml_spec_with_expectations_is_read(tmp_path, user, celery_dispatch):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: from yaml\nprompt_set: chat\nconcurrency_levels: [1]\nexpect:\n  - n-gram lookup k=4 faster\n"
        "max_num_seqs: 8\nmax_num_batched_tokens: 2048\nkv_cache_dtype: auto\narms:\n  - method: ngram\n"
    )

    status, _ = _command(str(path), owner="alice")

    assert status == HELD
    experiment = Experiment.objects.get()
    assert experiment.name == "from yaml"
    assert (experiment.max_num_seqs, experiment.max_num_batched_tokens, experiment.kv_cache_dtype) == (8, 2048, "auto")


@pytest.mark.django_db
def test_a_refused_spec_prints_the_forms_messages_and_exits_2(tmp_path, user):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC | {"num_prompts": 5}))

    status, out = _command(str(path), owner="alice")

    assert status == REFUSED
    assert "Prompts per level: At least 4 × the highest concurrency level (4) = 16 prompts" in out
    assert not Experiment.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("spec.json", "{not json", "spec.json: Expecting property name"),
        ("spec.json", "[1, 2]", "spec.json: the spec must be an object of experiment fields, not list."),
        ("spec.yaml", "name: [unclosed", "spec.yaml: while parsing"),
        ("spec.json", b"\xff\xfe{}", "spec.json: 'utf-8' codec can't decode"),
    ],
)
def test_an_unreadable_spec_file_is_named_and_exits_2(tmp_path, user, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())

    status, out = _command(str(path), owner="alice")

    assert status == REFUSED
    assert message in out


@pytest.mark.django_db
def test_following_a_finished_experiment_gives_the_table_and_the_expectations_status(user):
    experiment = seed_finished_experiment()

    held, out = _command(experiment=experiment.pk, owner="alice", expect=["n-gram k=4 faster at concurrency <= 4"])
    not_held, out_not = _command(experiment=experiment.pk, owner="alice", expect=["draft k=3 faster at <= 4"])

    assert held == HELD
    assert "HELD: n-gram k=4 faster at concurrency <= 4 (at 1: faster" in out
    assert "tpot speedup over the baseline" in out
    assert not_held == NOT_HELD
    assert "NOT HELD: draft k=3 faster at <= 4 (at 4: slower" in out_not


# ---------------------------------------------------------------- the standalone script over HTTP


@pytest.mark.django_db(transaction=True)
def test_the_script_submits_and_judges_over_http(live_server, tmp_path, user, celery_dispatch, capsys):
    token = Token.objects.create(user=user).key
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))

    status = specdash_client.main([str(path), "--url", live_server.url, "--token", token])
    finished = seed_finished_experiment()
    expectation = ["--expect", "draft k=3 faster at <= 4", "--expect", "n-gram k=4 faster"]
    judged = specdash_client.main(
        ["--experiment", str(finished.pk), "--url", live_server.url, "--token", token, *expectation]
    )

    out = capsys.readouterr().out
    submitted = Experiment.objects.get(name="from ci")
    assert status == HELD
    assert f"submitted experiment {submitted.pk}" in out
    assert judged == NOT_HELD
    assert "finished: 12/12 runs done" in out or "finished: 18/18 runs done" in out
    assert "HELD: n-gram k=4 faster (at 1: faster" in out
    assert "NOT HELD: draft k=3 faster at <= 4 (at 4: slower" in out


@pytest.mark.django_db(transaction=True)
def test_the_script_prints_the_apis_refusal(live_server, tmp_path, user, capsys):
    token = Token.objects.create(user=user).key
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC | {"concurrency_levels": [0]}))

    status = specdash_client.main([str(path), "--url", live_server.url, "--token", token])
    bad_token = specdash_client.main([str(path), "--url", live_server.url, "--token", "x" * 40])

    out = capsys.readouterr().out
    assert (status, bad_token) == (REFUSED, REFUSED)
    assert "concurrency_levels: Concurrency must be at least 1 (got 0)." in out
    assert "HTTP 401: Invalid token." in out
