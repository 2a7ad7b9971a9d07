"""The block as the unit of dispatch on a fleet (issue 38, experiments/execution/block_claims.py):
a block is claimed whole by one worker, released whole when its worker dies (queued again once,
then failed with the reason), refused to a worker of another hardware class (recorded with why),
looked at in the order the blocks completed, and counted against the budget while in flight."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from experiments import lifecycle
from experiments.analysis import continuation, primary
from experiments.analysis.loader import block_order, load_runs
from experiments.execution import block_claims
from experiments.execution import services as execution
from experiments.execution.hardware_class import HardwareClass
from experiments.models import Block, Experiment, FleetWorker, Run
from tests.analysis.test_continuation import _experiment
from tests.factories import RunFactory
from tests.workers import fakes
from workers import runner, tasks

pytestmark = pytest.mark.django_db

CPU = HardwareClass.of(fakes.FAKE_HARDWARE)
served = fakes.served  # the fake server and load generator, as a fixture here too


def _seat(name: str, hardware: HardwareClass = CPU) -> block_claims.Seat:
    return block_claims.Seat(name, name.split("@")[1], "", hardware, f"{name.split('@')[1]}:1:{name}")


def _claim(experiment: Experiment, seat: block_claims.Seat) -> Block | None:
    return block_claims.block_claim(experiment_id=experiment.id, seat=seat).block


def _runs_done(block: Block) -> None:
    block_claims.block_runs(block).update(status=Run.Status.SUCCEEDED, finished_at=timezone.now())


def test_two_workers_never_claim_the_same_block(celery_dispatch):
    experiment = fakes.new_experiment(celery_dispatch)
    a, b = _seat("cpu@host-a"), _seat("cpu@host-b")

    claimed = [_claim(experiment, a), _claim(experiment, b), _claim(experiment, a), _claim(experiment, b)]

    assert [(block.number, block.worker_name) for block in claimed[:3]] == [
        (1, "cpu@host-a"), (2, "cpu@host-b"), (3, "cpu@host-a"),
    ]  # fmt: skip
    assert claimed[3] is None  # nothing left to claim
    assert set(experiment.blocks.values_list("status", "attempts")) == {(Block.Status.RUNNING, 1)}
    # A worker runs a run of a block only while it holds that block.
    run = block_claims.block_runs(claimed[0]).first()
    assert not block_claims.run_claim_in_block(
        run_id=run.id, block_id=claimed[0].id, owner=b.owner, worker_host=b.host, worker_name=b.name
    )
    assert block_claims.run_claim_in_block(
        run_id=run.id, block_id=claimed[0].id, owner=a.owner, worker_host=a.host, worker_name=a.name
    )


@pytest.mark.django_db(transaction=True)
def test_workers_claiming_at_once_each_get_distinct_blocks(celery_dispatch):
    experiment = fakes.new_experiment(celery_dispatch, repetitions=6, sequential=False)
    got: dict[str, list[int]] = {}

    def worker(name: str) -> None:
        try:
            seat, mine = _seat(name), []
            while (block := _claim(experiment, seat)) is not None:
                mine.append(block.number)
            got[name] = mine
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(f"cpu@host-{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    numbers = [number for mine in got.values() for number in mine]
    assert sorted(numbers) == [1, 2, 3, 4, 5, 6]  # every block once, none twice
    holders = dict(experiment.blocks.values_list("number", "worker_name"))
    assert all(holders[number] == name for name, mine in got.items() for number in mine)


def _stale(block: Block) -> None:
    Block.objects.filter(id=block.id).update(lease_at=timezone.now() - timedelta(hours=1))


def test_a_dead_workers_block_is_queued_again_whole_once_then_failed_with_the_reason(celery_dispatch, settings):
    experiment = fakes.new_experiment(celery_dispatch, repetitions=1)
    a, b = _seat("cpu@host-a"), _seat("cpu@host-b")
    block = _claim(experiment, a)
    first, second = block_claims.block_runs(block).order_by("block_position", "level_position")[:2]
    for run in (first, second):
        assert block_claims.run_claim_in_block(
            run_id=run.id, block_id=block.id, owner=a.owner, worker_host=a.host, worker_name=a.name
        )
    execution.run_mark_succeeded(run_id=first.id)  # one run completed on host-a before it died
    _stale(block)
    celery_dispatch.reset_mock()

    tasks.runs_reap_stale()

    block.refresh_from_db()
    assert (block.status, block.worker_name, block.attempts) == (Block.Status.QUEUED, "", 1)
    assert "Attempt 1 on cpu@host-a: Its worker stopped beating. Queued again whole." in block.error
    # Whole: the run host-a completed is measured again on the next host too.
    assert set(block_claims.block_runs(block).values_list("status", "worker_host")) == {(Run.Status.QUEUED, "")}
    assert celery_dispatch.called  # handed to the queue's workers again
    # host-a's late results for it are not taken: the block is another host's now.
    assert not execution.run_record_result(run_id=second.id, store=lambda: None, worker_name=a.name)

    again = _claim(experiment, b)
    assert (again.id, again.worker_name, again.attempts) == (block.id, "cpu@host-b", 2)
    _stale(again)
    tasks.runs_reap_stale()

    block.refresh_from_db()
    assert block.status == Block.Status.FAILED
    assert block.look_order == 1  # closed: its look is taken
    assert block.error.endswith("Attempt 2 on cpu@host-b: Its worker stopped beating.\nFailed.")
    given_up = "Its worker stopped beating; the block was tried 2 times on separate workers and is given up."
    assert set(block_claims.block_runs(block).values_list("status", "error")) == {(Run.Status.FAILED, given_up)}
    assert _claim(experiment, a) is None


def test_a_worker_of_another_hardware_class_does_not_claim_and_is_recorded_with_why(celery_dispatch):
    experiment = fakes.new_experiment(celery_dispatch)
    other = HardwareClass.of(fakes.FAKE_HARDWARE | {"cpu_model": "Other CPU", "vllm_version": "0.31.0"})
    assert _claim(experiment, _seat("cpu@host-a")).number == 1  # the first claim sets the class

    refused = block_claims.block_claim(experiment_id=experiment.id, seat=_seat("cpu@host-b", other))

    assert refused.block is None
    assert refused.passed_over == (
        "vLLM version 0.31.0 where the experiment's is 0.32.0; CPU model Other CPU where the experiment's is Fake CPU"
    )
    assert experiment.blocks.filter(status=Block.Status.QUEUED).count() == 2
    rows = {row.worker_name: (row.took_part, row.reason) for row in FleetWorker.objects.filter(experiment=experiment)}
    assert rows == {"cpu@host-a": (True, ""), "cpu@host-b": (False, refused.passed_over)}
    assert FleetWorker.objects.get(worker_name="cpu@host-b").hardware["cpu_model"] == "Other CPU"


def test_the_runner_of_another_class_leaves_the_experiment_without_starting_a_server(
    served, celery_dispatch, monkeypatch
):
    experiment = fakes.new_experiment(celery_dispatch)
    _claim(experiment, _seat("cpu@host-a"))
    monkeypatch.setattr(runner.fingerprint, "worker_fingerprint", lambda python: fakes.FAKE_HARDWARE | {"gpu_count": 1})

    runner.experiment_run_all(experiment.id, worker_host="host-b", worker_name="cpu@host-b")

    assert served.servers == []
    assert experiment.blocks.filter(status=Block.Status.QUEUED).count() == 2
    assert "GPU count 1 where the experiment's is 0" in FleetWorker.objects.get(worker_name="cpu@host-b").reason


def test_one_worker_runs_every_block_whole_and_records_itself_on_each(served, celery_dispatch):
    experiment = fakes.run_all(fakes.new_experiment(celery_dispatch))

    assert experiment.status == Experiment.Status.FINISHED
    blocks = list(experiment.blocks.values_list("number", "status", "worker_name", "worker_host", "look_order"))
    assert blocks == [(n, Block.Status.DONE, "cpu@host-1", "host-1", n) for n in (1, 2, 3)]
    # Each server served one arm of one block, and each block's runs ran on its one worker.
    for server in served.servers:
        assert len({(run.arm_id, run.repetition) for run in served.runs_of(server)}) == 1
    assert set(experiment.runs.values_list("worker_name", flat=True)) == {"cpu@host-1"}
    assert list(FleetWorker.objects.values_list("worker_name", "took_part")) == [("cpu@host-1", True)]


def test_looks_count_the_blocks_in_the_order_they_completed(celery_dispatch):
    experiment = fakes.new_experiment(celery_dispatch)
    a, b, c = (_claim(experiment, _seat(f"cpu@host-{n}")) for n in "abc")

    _runs_done(b)  # block 2 completes first, on host-b
    lifecycle.experiment_block_done(experiment=experiment, block_id=b.id, capacity=3)
    assert not block_claims.block_close(block_id=a.id)  # block 1 still has runs to do
    _runs_done(a)
    lifecycle.experiment_block_done(experiment=experiment, block_id=a.id, capacity=3)

    order = block_order(experiment)
    assert order.places == {2: 1, 1: 2, 3: 3}  # block 3, still in flight, after the completed ones
    assert order.closed == {1, 2}
    assert dict(experiment.blocks.values_list("number", "look_order")) == {1: 2, 2: 1, 3: None}
    # A cell's looks count from the place of the first block it ran in.
    assert set(primary.cells_entered(experiment).values()) == {1}
    assert c.status == Block.Status.RUNNING


def test_the_analysis_takes_completed_blocks_only_at_their_place_in_completion_order():
    experiment = _experiment(blocks=3)
    for number, look_order in ((1, 3), (2, 1), (3, None)):
        Block.objects.create(experiment=experiment, number=number, look_order=look_order, status="done")

    blocks = {(run.arm, run.block) for run in load_runs(experiment)}

    assert {block for _, block in blocks} == {1, 2}  # block 3 waits; block 2 is the first look
    baseline = experiment.arms.get(label="baseline", is_replicate=False).id
    assert {(baseline, 1), (baseline, 2)} <= blocks


def _queued_block(experiment: Experiment, number: int) -> None:
    for arm in experiment.arms.filter(label__in=("baseline", "replicate", "open")):
        RunFactory(arm=arm, experiment=experiment, concurrency=1, repetition=number, status=Run.Status.QUEUED)


def _step(experiment: Experiment, room: int) -> continuation.Step:
    decided = primary.primary_decisions(experiment, load_runs(experiment), final=False)
    return continuation.next_step(experiment, decided, room=room)


def test_the_budget_counts_the_blocks_in_flight():
    # 30 device-minutes for 3 blocks (2.5 a session); a next block (baseline, replicate, open) 7.5 more.
    experiment = _experiment(blocks=3, max_blocks=8, max_device_minutes=45.5)
    step = _step(experiment, room=3)
    assert (step.block, step.blocks) == (4, 2)  # 3 idle workers, but the budget affords 2 blocks

    _queued_block(experiment, 4)  # in flight, not begun: its 7.5 minutes are as good as spent
    step = _step(experiment, room=3)
    assert (step.block, step.blocks) == (5, 1)

    _queued_block(experiment, 5)
    assert _step(experiment, room=3).stop == continuation.BUDGET


def test_no_more_blocks_in_flight_than_idle_workers_of_the_class():
    experiment = _experiment(blocks=3, max_blocks=8)  # the "open" arm wants more blocks
    for number in (1, 2, 3):
        Block.objects.create(experiment=experiment, number=number, look_order=number, status=Block.Status.DONE)

    assert lifecycle.experiment_block_done(experiment=experiment, block_id=None, capacity=3) == 3
    assert sorted(experiment.blocks.open().values_list("number", flat=True)) == [4, 5, 6]
    assert set(experiment.runs.filter(repetition__gt=3).values_list("status", flat=True)) == {Run.Status.QUEUED}
    # Three in flight for three workers: none more until one completes, or a fourth worker idles.
    assert lifecycle.experiment_block_done(experiment=experiment, block_id=None, capacity=3) == 0
    assert lifecycle.experiment_block_done(experiment=experiment, block_id=None, capacity=4) == 1
    assert block_claims.blocks_in_flight(experiment) == 4


def test_a_second_worker_starting_the_experiment_finds_it_running_and_goes_on(celery_dispatch):
    experiment = fakes.new_experiment(celery_dispatch)
    second_copy = Experiment.objects.get(id=experiment.id)  # read by the other worker before the first started it
    execution.experiment_mark_running(experiment=experiment)

    execution.experiment_mark_running(experiment=second_copy)

    assert second_copy.status == Experiment.Status.RUNNING
