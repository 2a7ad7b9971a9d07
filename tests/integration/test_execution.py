"""Through the real parts: PostgreSQL, Redis, a Celery worker process and vLLM servers.

Each vLLM server start costs most of a minute on a CPU host, so one experiment serves several
tests where their capabilities combine: the baseline, an n-gram arm with a synthetic
acceptance sweep, a draft-model arm and the draft's calibration arm, in two blocks with one
server per arm (four server starts; a CPU worker refuses the sweep without starting a server).
`test_experiment_runs_end_to_end_on_real_vllm` checks what its runs record, the calibration
test the draft cost it measured and the prediction built on it, the sweep test that the sweep
never touched the arms' figures. The A/A replicate's test starts servers of its own, a server
per block and arm. (A server that cannot start is tested in the fleet, on a queue of its own:
tests/integration/test_multi_worker.py.)
"""

import itertools
import os
import re
import statistics
from html import unescape
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Sum
from django.test import Client
from django.urls import reverse

from experiments.analysis import acceptance_sweep, device_time
from experiments.analysis.loader import analysed_metrics
from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import worker_queues
from experiments.measurement.encoding.token_ids import unpack_token_ids
from experiments.measurement.engine import prediction
from experiments.measurement.stats.verdicts import FASTER, MIN_BLOCKS, SLOWER
from experiments.models import (
    Arm,
    EnvironmentSnapshot,
    Experiment,
    ExperimentAnalysis,
    RequestRecord,
    Run,
    RunSummary,
    SpeedupEstimate,
)
from experiments.prompts.catalog import prompt_set_hash
from tests.factories import experiment_fields
from tests.worker_fixtures import shared_rows, wait_for_experiment
from workers.server import synthetic_acceptance
from workers.server.affinity import plan_binding

pytestmark = [pytest.mark.worker, pytest.mark.vllm]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
DRAFT = settings.SPECDASH_MODELS_DIR / "draft"
MODELS_BUILT = pytest.mark.skipif(
    not (DRAFT / "config.json").exists(), reason="demo models not built (./dev test builds them)"
)
SWEEP_LENGTHS = (1.5, 3.0)
# The production settings a CPU server takes, set on the arms experiment's protocol.
SERVER_SETTINGS = {"max_num_seqs": 4, "max_num_batched_tokens": 1024}


def _fields(**overrides) -> dict:
    """On the demo target (the factory's): a protocol small enough for a CPU worker to run
    in minutes, at temperature 0 so that outputs can be compared."""
    protocol = {
        "name": "integration", "prompt_set": "code_edit", "prompt_set_hash": prompt_set_hash("code_edit"),
        "num_prompts": 6, "max_tokens": 32, "temperature": 0.0, "concurrency_levels": [1, 4], "repetitions": 1,
        "warmup_requests": 1,
    }  # fmt: skip
    return experiment_fields(**protocol | overrides)


@pytest.fixture
def owner():
    return get_user_model().objects.create_user(username="runner", password="pw-for-tests")


def _check_schedule_was_followed(experiment: Experiment) -> None:
    """Runs started in schedule order, each (block, arm) on a server of its own, or with one
    server per arm, each arm's blocks in turn on its server (workers.runner.experiment_sessions).
    The runs of a synthetic acceptance sweep are left out: a CPU worker refuses them unstarted."""
    real = experiment.runs.real()
    by_start = list(real.order_by("started_at").values_list("id", flat=True))
    scheduled = real.in_execution_order(server_per_block=experiment.server_per_block)
    assert by_start == list(scheduled.values_list("id", flat=True))
    assert all(run.started_at < run.finished_at for run in real)
    logs = _server_logs(experiment)
    if experiment.server_per_block:
        # A server per arm and block it ran in (a block added later runs only some arms).
        assert len(logs) == real.values("arm", "repetition").distinct().count()
    else:
        assert len(logs) == experiment.arms.count()


def _server_logs(experiment: Experiment) -> list:
    """One log per server the experiment started (a synthetic sweep's are refused unstarted on
    CPU); an earlier test database may have left logs under the same id."""
    folder = settings.DATA_DIR / "server-logs" / f"experiment-{experiment.id}"
    return [
        log
        for log in folder.glob("arm-*.log")
        if log.stat().st_mtime >= experiment.created_at.timestamp() and "synthetic" not in log.name
    ]


def _replicate_calls(experiment: Experiment) -> list[str]:
    """The replicate's engine-timed TPOT verdicts (the grid's first metric) that claim a
    difference, with the block ratios behind each."""
    rows = SpeedupEstimate.objects.filter(experiment=experiment, arm__is_replicate=True, metric="server_tpot")
    return [f"{s.outcome} at {s.concurrency}: {s.block_ratios}" for s in rows if s.outcome in (FASTER, SLOWER)]


@MODELS_BUILT
@pytest.mark.django_db(transaction=True)
def test_an_aa_replicate_is_not_called_different_from_the_baseline(celery_worker_process, owner):
    """The baseline and an identical replicate in three blocks, a server per block and arm: the
    replicate must not be called different from the baseline, and the block order must be
    recorded and differ between blocks. Three blocks are the fewest that give a verdict
    (verdicts.MIN_BLOCKS), so this is the smallest experiment in which a replicate can be called
    different: six server starts.

    The replicate's family is tested at 5 %, so a call is answered with a second, independent
    experiment (another seed): a design that is biased (one arm systematically first on a warm
    host, say) fails both, while noise fails both in only 0.25 % of test runs.
    """
    fields = _fields(
        repetitions=MIN_BLOCKS, sequential=True, aa_replicate=True, concurrency_levels=[2], num_prompts=8, max_tokens=24
    )
    calls = []
    for seed in (1, 2):
        experiment = definition.experiment_create(owner=owner, arms=[], **fields | {"seed": seed})
        experiment = wait_for_experiment(experiment.id, timeout_s=900)
        assert experiment.status == Experiment.Status.FINISHED
        _check_schedule_was_followed(experiment)
        orders = [
            list(
                experiment.runs.filter(repetition=block).order_by("block_position").values_list("arm__label", flat=True)
            )
            for block in range(1, MIN_BLOCKS + 1)
        ]
        assert len({tuple(order) for order in orders}) > 1, orders  # seeds 1 and 2 draw different orders
        analysis = ExperimentAnalysis.objects.get(experiment=experiment)
        assert any(v["replicate"] and "A/A replicate" in v["text"] for v in analysis.verdicts)
        assert [row["identical_share"] for row in analysis.fidelity] != []
        calls = _replicate_calls(experiment)
        if not calls:
            return
    pytest.fail(f"the A/A replicate was called different from the baseline in two experiments: {calls}")


# ---------------------------------------------------------------- one experiment, three capabilities


@pytest.fixture(scope="module")
def arms_experiment(celery_worker_process, django_db_blocker):
    """The baseline, an n-gram arm with a synthetic sweep of two lengths, a draft-model arm (its
    draft at tensor parallel size 1) and its calibration arm (the draft served alone), at levels 1
    and 2 in two blocks, one server per arm, with server settings: the tests below assert on it.

    Every output runs to its 32 tokens (ignore_eos): a tiny model's greedy output can stop at
    EOS after a token or two, and a one-token output has no decode phase to time. The length no
    longer guards the TPOT: the engine-timed TPOT has a ratio in every block whatever the stream
    did, and a stream that reached the client merged is flagged, not measured as TPOT 0."""
    with shared_rows(django_db_blocker):
        with django_db_blocker.unblock():
            owner = get_user_model().objects.create_user(username="arms", password="pw-for-tests")
            arms = [
                ArmSpec(
                    method=Arm.Method.NGRAM, num_speculative_tokens=3, synthetic_sweep=SWEEP_LENGTHS,
                    params={"prompt_lookup_min": 2, "prompt_lookup_max": 4},
                ),
                ArmSpec(
                    method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=4,
                    params={"model": str(DRAFT), "draft_tensor_parallel_size": 1},
                ),
            ]  # fmt: skip
            experiment = definition.experiment_create(
                owner=owner, arms=arms,
                **_fields(
                    name="arms on vllm", num_prompts=4, max_tokens=32, ignore_eos=True, concurrency_levels=[1, 2],
                    repetitions=2, server_per_block=False, aa_replicate=False, draft_calibration=True,
                    **SERVER_SETTINGS,
                ),
            )  # fmt: skip
            experiment = wait_for_experiment(experiment.id, timeout_s=1800)
        yield SimpleNamespace(experiment=experiment, owner=owner)


def _arms_client(arms_experiment) -> Client:
    client = Client()
    client.force_login(arms_experiment.owner)
    return client


@MODELS_BUILT
@pytest.mark.shared_rows
@pytest.mark.django_db
def test_experiment_runs_end_to_end_on_real_vllm(arms_experiment):
    experiment = arms_experiment.experiment
    assert experiment.status == Experiment.Status.FINISHED, list(experiment.runs.values_list("error", flat=True))
    runs = list(experiment.runs.real().select_related("arm", "summary"))
    assert len(runs) == 4 * 2 * 2  # arms (with the calibration arm) x levels x blocks
    assert {run.status for run in runs} == {Run.Status.SUCCEEDED}
    _check_schedule_was_followed(experiment)
    span_ratios = []
    for run in runs:
        rows = RequestRecord.objects.filter(run=run)
        # Each measured prompt once, the warm-up prompt (index 0) never measured.
        assert sorted(rows.values_list("prompt_index", flat=True)) == list(range(1, 1 + experiment.num_prompts))
        summary = run.summary
        assert summary.completed + summary.failed == rows.count()
        assert summary.total_output_tokens == rows.filter(error="").aggregate(n=Sum("output_tokens"))["n"]
        assert 0 < summary.achieved_concurrency <= run.concurrency * 1.05
        for row in rows.filter(error=""):
            assert len(unpack_token_ids(row.output_token_ids)) == row.output_tokens
            # The engine's own decode time rode on the last chunk, for every arm; it lies inside
            # the client's send → last chunk.
            assert row.server_decode_ms is not None
            assert 0 <= row.server_decode_ms <= row.e2e_ms
            # vLLM's time to first token and queue time fit inside the client's TTFT, and TPOT
            # as the engine timed it is its decode time per token.
            assert 0 <= row.server_queue_ms + row.server_ttft_ms <= row.ttft_ms
            assert row.server_tpot_ms == pytest.approx(row.server_decode_ms / (row.output_tokens - 1))
            span_ratios.append(row.stream_span_ratio)
        assert summary.stream_checked == summary.completed
        # The host's state over the measured requests, read from /proc by the load generator (workers/host/).
        assert summary.host_cores == os.cpu_count()
        assert 0.0 <= summary.host_foreign_cpu <= 1.0
        assert 0.0 <= summary.host_steal <= 1.0
        assert summary.host_load >= 0.0
        environment = EnvironmentSnapshot.objects.get(run=run)
        assert environment.vllm_version
        binding = plan_binding(os.sched_getaffinity(0))
        # The engine's threads, the client, and where the API server and engine core were put.
        placed = binding and {"api_server": list(binding.client_cores), "engine_core": list(binding.engine_cores)}
        assert environment.cpu_binding == (binding.record() | {"placement": placed} if binding else {})
        # What vLLM decided, from its server's log: the CPU build has no Triton, so the V1 runner,
        # and eager mode (--enforce-eager), so no CUDA graphs; the CPU platform turns async scheduling off.
        assert (environment.model_runner, environment.cuda_graphs, environment.async_scheduling) == ("V1", "off", False)
        assert environment.kv_cache_tokens > 0
        assert "Model Runner V2 requires Triton" in environment.engine_log_lines["model_runner"]
        if not run.arm.is_speculative:  # the baseline, and the calibration arm's plain decoding
            assert not summary.spec_num_drafts
            continue
        per_pos = summary.spec_accepted_per_pos
        assert summary.spec_num_drafts > 0
        assert len(per_pos) == run.arm.num_speculative_tokens
        assert all(a >= b for a, b in itertools.pairwise(per_pos)), per_pos
        assert sum(per_pos) == summary.spec_num_accepted_tokens
        with_steps = [bool(r.spec_accepted_per_step) for r in rows]
        # A draft model proposes at every step; an n-gram lookup can find nothing to propose.
        assert all(with_steps) if run.arm.method == Arm.Method.DRAFT_MODEL else any(with_steps)
    assert RunSummary.objects.filter(run__experiment=experiment, run__in=[run.id for run in runs]).count() == len(runs)
    # The client saw the stream as the engine made it: the median request's decode span, last
    # chunk - first chunk, within 10 % of vLLM's own decode time (docs/metrics.md, "Stream fidelity").
    assert statistics.median(span_ratios) == pytest.approx(1.0, abs=0.1), sorted(span_ratios)
    # The analysis was stored with the runs: a speedup per compared arm, level and metric,
    # a sentence per arm and verdict metric, and the fidelity rows (temperature 0).
    analysis = ExperimentAnalysis.objects.get(experiment=experiment)
    estimates = SpeedupEstimate.objects.filter(experiment=experiment)
    assert estimates.count() == 2 * 2 * len(analysed_metrics(experiment))  # goodput only with an SLO
    assert all(s.n_repetitions == 2 and len(s.block_ratios) == 2 for s in estimates if s.metric == "server_tpot")
    # 2 blocks: estimates, no verdicts (a distorted stream says so first on the client's timings).
    assert {s.outcome for s in estimates} <= {"too few blocks", "stream distorted"}
    assert len(analysis.verdicts) == 2 * 4  # compared arms x verdict metrics
    assert {row["level"] for row in analysis.fidelity} == {1, 2}
    # The n-gram arm's server said why it had no async scheduling; the page shows every arm's
    # decisions and flags one: the arms decided alike on this host, but the draft model's KV
    # cache comes out of the same budget, so its servers hold fewer tokens than the baseline's.
    ngram = EnvironmentSnapshot.objects.filter(run__experiment=experiment, run__arm__method=Arm.Method.NGRAM).first()
    assert "ngram-based speculative decoding" in ngram.engine_log_lines["async_scheduling"]
    html = _arms_client(arms_experiment).get(reverse("experiments:detail", args=[experiment.pk])).text
    assert html.count('class="engine-decision"') == experiment.arms.count()
    assert "Model Runner V1</span> ·" in html
    assert "CUDA graphs off" in html
    assert f"KV cache {environment.kv_cache_tokens:,} tokens" in html
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment)
    baseline = {s.kv_cache_tokens for s in snapshots.filter(run__arm__method=Arm.Method.BASELINE)}
    drafted = {s.kv_cache_tokens for s in snapshots.filter(run__arm__method=Arm.Method.DRAFT_MODEL)}
    assert max(drafted) < min(baseline)
    (flag,) = re.findall(r'<tr class="engine-flag">.*?<p class="warning">(.*?)</p>', html, re.S)
    assert "KV-cache tokens against the baseline" in unescape(flag)
    assert experiment.arms.get(method=Arm.Method.DRAFT_MODEL).label in unescape(flag)


@MODELS_BUILT
@pytest.mark.shared_rows
@pytest.mark.django_db
def test_each_server_recorded_its_start_up_on_its_first_run(arms_experiment):
    """Device time: one server per arm (and sweep length) for both blocks, whose first run
    carries the seconds from its launch to /health; a session refused before any server (the
    sweep on a CPU host) carries none."""
    experiment = arms_experiment.experiment
    sessions: dict[tuple, list[Run]] = {}
    for run in experiment.runs.order_by("started_at"):
        sessions.setdefault((run.arm_id, run.synthetic_acceptance_length), []).append(run)
    served = [runs for runs in sessions.values() if runs[0].status == Run.Status.SUCCEEDED]
    assert len(served) >= experiment.arms.count()
    for first, *others in served:
        assert 0 < first.server_start_s < worker_queues.server_start_timeout_s(experiment.worker_queue)
        assert [run.server_start_s for run in others] == [None] * len(others)
    unserved = [run for runs in sessions.values() if runs not in served for run in runs]
    assert [run.server_start_s for run in unserved] == [None] * len(unserved)
    spent = device_time.spent(experiment)
    assert (spent.wall_clock, spent.recorded.starts) == (False, len(served))
    assert spent.recorded.start_minutes == pytest.approx(sum(runs[0].server_start_s for runs in served) / 60)


@MODELS_BUILT
@pytest.mark.shared_rows
@pytest.mark.django_db
def test_every_server_ran_with_the_experiments_server_settings(arms_experiment):
    """The same settings for the baseline, every arm and the calibration arm: in each stored
    server command, in what vLLM says it was given, and on the protocol card."""
    experiment = arms_experiment.experiment
    assert not experiment.runs.real().exclude(status=Run.Status.SUCCEEDED).exists()
    commands = {tuple(c) for c in EnvironmentSnapshot.objects.filter(run__experiment=experiment).values_list(
        "server_command", flat=True
    )}  # fmt: skip
    assert len(commands) == experiment.arms.count()
    for command in commands:
        assert command[command.index("--max-num-seqs") :][:4] == (
            "--max-num-seqs",
            "4",
            "--max-num-batched-tokens",
            "1024",
        )
        assert "--gpu-memory-utilization" not in command
    draft = experiment.arms.get(method=Arm.Method.DRAFT_MODEL)
    assert draft.speculative_config()["draft_tensor_parallel_size"] == 1
    logs = _server_logs(experiment)
    assert len(logs) == experiment.arms.count()
    for log in logs:
        given = next(line for line in log.read_text().splitlines() if "non-default args:" in line)
        assert "'max_num_seqs': 4" in given
        assert "'max_num_batched_tokens': 1024" in given
    html = _arms_client(arms_experiment).get(reverse("experiments:detail", args=[experiment.pk])).text
    shown = html.split('id="protocol-server-settings">')[1].split("</dd>")[0]
    assert "Max sequences per step 4 <code>--max-num-seqs</code>" in shown
    assert "Max batched tokens per step 1024 <code>--max-num-batched-tokens</code>" in shown


@MODELS_BUILT
@pytest.mark.shared_rows
@pytest.mark.django_db
def test_the_calibration_arm_measures_the_draft_cost_that_the_prediction_uses(arms_experiment):
    experiment = arms_experiment.experiment
    assert experiment.status == Experiment.Status.FINISHED
    assert not experiment.runs.real().exclude(status=Run.Status.SUCCEEDED).exists()
    calibration = experiment.arms.get(is_calibration=True)
    draft_arm = experiment.arms.get(method=Arm.Method.DRAFT_MODEL)
    assert calibration.label == "calibration: draft model alone (draft)"
    # Its server served the draft model alone, with plain decoding.
    command = EnvironmentSnapshot.objects.filter(run__arm=calibration).first().server_command
    assert command[command.index("--model") + 1] == str(DRAFT)
    assert "--speculative-config" not in command
    assert not SpeedupEstimate.objects.filter(arm=calibration).exists()

    series = experiment.analysis.series
    [stored] = series["calibration"]
    rows = {row["level"]: row for row in stored["rows"]}
    assert sorted(rows) == [1, 2]
    points = series["predicted"][str(draft_arm.id)]["points"]
    assert sorted(point["level"] for point in points) == [1, 2]
    for point in points:
        row = rows[point["level"]]
        # c = the draft's step time / the baseline's: a 1-layer draft against the 4-layer target,
        # from the engine's decode times, so a client that read a fast draft's stream late (or
        # at once) does not leave a level or a block without a step time.
        assert row["blocks"] == 2
        assert point["cost_source"] == prediction.MEASURED
        assert point["cost_ratio"] == pytest.approx(row["step_ms"] / row["baseline_step_ms"], rel=1e-9)
        assert 0 < point["cost_ratio"] < 1
        assert 1 <= point["tokens_per_step"] <= 5
        assert point["predicted"] == pytest.approx(point["tokens_per_step"] / (4 * point["cost_ratio"] + 1))
        assert point["agreement"] in ("agree", "part", "not testable")
        assert point["measured_lo"] <= point["measured"] <= point["measured_hi"]

    client = _arms_client(arms_experiment)
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).text
    assert 'id="table-calibration"' in html
    assert "measured at this level by the calibration arm" in html
    assert "with each draft model served alone to measure its cost" in html
    assert series["predicted"][str(draft_arm.id)]["sentence"] in html.replace("&#x27;", "'")
    print(series["predicted"][str(draft_arm.id)]["sentence"], stored["rows"])  # the figures, with pytest -s
    api = client.get(reverse("api:experiment-results", args=[experiment.pk])).json()
    assert [arm["is_calibration"] for arm in api["arms"]] == [False, False, False, True]
    assert api["series"]["calibration"] == series["calibration"]


@MODELS_BUILT
@pytest.mark.shared_rows
@pytest.mark.django_db
def test_a_sweep_runs_where_vllm_allows_it_and_never_touches_the_arms_figures(arms_experiment):
    """What the sweep's runs do depends on the host's vLLM: 0.32's GPU kernels implement
    synthetic acceptance, its CPU build refuses it (workers/server/synthetic_acceptance.py). On a host
    that runs it, the stored sweep is checked against what vLLM measured (τ near the length
    asked for); on a CPU host, that the worker started no server for the sweep and failed its
    runs with vLLM's reason, while the arms' own runs, statistics and page are those of an
    experiment without it."""
    experiment = arms_experiment.experiment
    assert experiment.status == Experiment.Status.FINISHED
    real = experiment.runs.real()
    assert sorted(real.values_list("status", flat=True)) == [Run.Status.SUCCEEDED] * 16
    assert RunSummary.objects.succeeded_of(experiment).count() == 16
    assert set(SpeedupEstimate.objects.filter(experiment=experiment).values_list("concurrency", flat=True)) == {1, 2}
    (sweep,) = acceptance_sweep.acceptance_sweeps(experiment=experiment)
    assert sweep.tau is not None
    assert sweep.tau > 1
    reason = synthetic_acceptance.unsupported_reason(settings.SPECDASH_VLLM_PYTHON)
    if reason is None:
        _check_the_sweep_ran(experiment, sweep)
    else:
        _check_the_sweep_was_refused(experiment, sweep, reason)
    html = _arms_client(arms_experiment).get(reverse("experiments:detail", args=[experiment.pk])).text
    assert "What acceptance it would take" in html
    assert "your draft gives τ" in html


def _check_the_sweep_ran(experiment, sweep):
    synthetic = RunSummary.objects.synthetic_sweep_of(experiment).select_related("run")
    assert sorted({s.run.synthetic_acceptance_length for s in synthetic}) == list(SWEEP_LENGTHS)
    assert len(sweep.levels) == 2
    for level in sweep.levels:
        assert [p.length for p in level.points] == list(SWEEP_LENGTHS)
        for point in level.points:
            assert point.speedup > 0
            # vLLM accepted at the rates that give the length asked for; 4 short requests leave some noise.
            assert point.measured_tau == pytest.approx(point.length, abs=0.35)


def _check_the_sweep_was_refused(experiment, sweep, reason):
    assert "Synthetic acceptance not supported with CPU sampling" in reason
    synthetic = experiment.runs.synthetic()
    assert sorted(set(synthetic.values_list("synthetic_acceptance_length", flat=True))) == list(SWEEP_LENGTHS)
    assert synthetic.count() == len(SWEEP_LENGTHS) * 2 * 2  # lengths x levels x blocks
    for run in synthetic:
        assert run.status == Run.Status.FAILED
        assert "refuses synthetic acceptance" in run.error
        assert "Synthetic acceptance not supported with CPU sampling" in run.error
    # A synthetic session's server log would be named …-synthetic-<length>-…: none was started.
    assert not list((settings.DATA_DIR / "server-logs" / f"experiment-{experiment.id}").glob("*synthetic*"))
    assert sweep.failed_runs == synthetic.count()
    assert all(not level.points for level in sweep.levels)
    assert not any("failed" in warning for warning in experiment.analysis.warnings)
