"""Device-minutes of a plan (experiments/measurement/planning/device_cost.py), on cases computed by hand."""

from dataclasses import replace

import pytest

from experiments.measurement.planning import device_cost
from experiments.measurement.planning.device_cost import DeviceTime, Median, Plan, QueueCosts
from experiments.measurement.planning.limits import Size
from experiments.measurement.planning.planner import SearchRange

# A run at concurrency c takes (2 + 8) × 10 / c token steps: 100 at c=1, 50 at c=2; at 0.1 s a
# step, 10 s and 5 s. A server start takes 30 s.
SIZE = Size(warmup=2, prompts=8, max_tokens=10, request_rate=None)
COSTS = QueueCosts(start=Median(30.0, 12), step=Median(0.1, 40))


def _plan(**fields) -> Plan:
    defaults = {
        "size": SIZE, "levels": (1, 2), "servers": 3, "added_servers": 3, "per_run": 0, "max_blocks": 4,
        "first_blocks": 4, "adds_blocks": False, "server_per_block": True,
    }  # fmt: skip
    return Plan(**defaults | fields)


def test_token_steps_count_warm_up_and_measured_requests_at_most_one_per_prompt_at_a_time():
    assert device_cost.token_steps(SIZE, 1) == 100
    assert device_cost.token_steps(SIZE, 4) == 25
    assert device_cost.token_steps(SIZE, 16) == 100 / 8  # no more at a time than there are prompts


def test_a_run_under_a_request_rate_lasts_at_least_its_arrivals():
    paced = Size(warmup=0, prompts=100, max_tokens=10, request_rate=2.0)
    assert device_cost.run_seconds(paced, 10, 0.1) == 50.0  # 100 steps take 10 s; 100 requests arrive in 50 s
    assert device_cost.run_seconds(paced, 1, 0.1) == 100.0


def test_a_median_of_records_or_the_default_with_none():
    assert device_cost.median_or([90.0, 10.0, 20.0], 300.0) == Median(20.0, 3)  # the mean would be 40
    assert device_cost.median_or([], 300.0) == Median(300.0, 0)
    assert not Median(300.0, 0).recorded


def test_a_fixed_design_costs_every_block_once():
    estimate = device_cost.estimate(_plan(tensor_parallel_size=2), COSTS)

    # 4 blocks × 3 servers: 12 starts of 30 s; 4 × 3 × (10 + 5) s of runs; × 2 GPUs.
    assert estimate.most == DeviceTime(360.0, 180.0, 2, starts=12, runs=24)
    assert (estimate.most.start_minutes, estimate.most.load_minutes, estimate.most.minutes) == (12.0, 6.0, 18.0)
    assert estimate.least == estimate.most
    assert not estimate.ranged
    assert (estimate.least_blocks, estimate.most_blocks) == (4, 4)


def test_blocks_added_until_settled_range_from_the_first_look_to_the_maximum_without_the_first_blocks_extras():
    # The baseline, the replicate, a draft arm and its calibration arm in the first 3 blocks;
    # the calibration arm runs in those only.
    plan = _plan(servers=4, added_servers=3, max_blocks=6, first_blocks=3, adds_blocks=True)

    estimate = device_cost.estimate(plan, COSTS)

    assert estimate.least == DeviceTime(12 * 30.0, 3 * 4 * 15.0, 1, starts=12, runs=24)  # 9 minutes
    assert estimate.most == DeviceTime(21 * 30.0, 180.0 + 3 * 3 * 15.0, 1, starts=21, runs=42)  # 15.75
    assert estimate.cumulative == pytest.approx((3.0, 6.0, 9.0, 11.25, 13.5, 15.75))
    assert (estimate.least_blocks, estimate.most_blocks) == (3, 6)
    assert estimate.blocks_within(12.0) == 4
    assert estimate.fits(15.75)
    assert not estimate.fits(15.7)


def test_a_search_adds_up_to_its_family_less_the_ends_from_the_earliest_block_each_may_enter():
    # Grid 1, 2, 4, 8, 16 with a family of 4: at most 2 levels added, the costliest (2, then 4),
    # placed after blocks 1 and 2 while 3 blocks remain for their looks.
    search = SearchRange(1, 16, 2.0)
    size = Size(warmup=0, prompts=16, max_tokens=8, request_rate=None)
    plan = _plan(
        size=size, levels=(1, 16), servers=2, added_servers=2, max_blocks=5, first_blocks=1, adds_blocks=True,
        search=search,
    )  # fmt: skip
    costs = QueueCosts(start=Median(20.0, 3), step=Median(0.5, 3))

    assert device_cost.added_levels(plan) == {2: 2, 4: 3}
    assert device_cost.added_levels(replace(plan, max_blocks=4)) == {2: 2}
    estimate = device_cost.estimate(plan, costs)
    # Runs: 64 s at c=1, 32 at 2, 16 at 4, 4 at 16.
    assert estimate.least == DeviceTime(6 * 20.0, 3 * 2 * 68.0, 1, starts=6, runs=12)
    assert estimate.most == DeviceTime(10 * 20.0, 2 * 68.0 + 2 * 100.0 + 3 * 2 * 116.0, 1, starts=10, runs=34)
    assert estimate.ranged


def test_a_search_without_blocks_added_runs_its_ends_only():
    plan = _plan(levels=(1, 16), search=SearchRange(1, 16, 2.0))
    assert device_cost.added_levels(plan) == {}


@pytest.mark.parametrize(("server_per_block", "starts"), [(True, 2 * (2 + 3)), (False, 2 + 2 * 3)])
def test_a_suffix_arm_starts_a_server_for_every_run(server_per_block, starts):
    plan = _plan(levels=(1, 2, 4), per_run=1, max_blocks=2, first_blocks=2, server_per_block=server_per_block)
    assert device_cost.estimate(plan, COSTS).most.starts == starts


def test_what_was_spent_is_the_wall_clock_for_an_experiment_recorded_before_start_ups():
    recorded = DeviceTime(0.0, 600.0, 1, starts=0, runs=4)
    assert device_cost.Spent(recorded).minutes == 10.0
    legacy = device_cost.Spent(recorded, wall_clock_minutes=14.5)
    assert (legacy.wall_clock, legacy.minutes) == (True, 14.5)
