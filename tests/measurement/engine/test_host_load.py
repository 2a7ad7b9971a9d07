"""The host's state over a run from two readings of /proc (experiments/measurement/engine/host_load.py)."""

import pytest

from experiments.measurement.engine import host_load
from experiments.measurement.engine.host_load import Reading

STAT = """cpu  1000 50 400 8000 100 10 40 25 7 0
cpu0 500 25 200 4000 50 5 20 12 3 0
intr 12345
"""


def test_the_aggregate_cpu_line_gives_busy_steal_and_total_ticks():
    # busy = user + nice + system + irq + softirq; guest is inside user already.
    assert host_load.parse_stat(STAT) == (1000 + 50 + 400 + 10 + 40, 25, 1000 + 50 + 400 + 8000 + 100 + 10 + 40 + 25)


def test_an_old_kernel_s_line_without_steal_parses():
    assert host_load.parse_stat("cpu 10 0 5 85\n") == (15, 0, 100)


def test_a_stat_without_the_aggregate_line_is_refused():
    with pytest.raises(ValueError, match="no aggregate cpu line"):
        host_load.parse_stat("cpu0 1 2 3 4\n")


def test_a_process_s_ticks_are_its_user_and_system_time_whatever_its_name():
    line = "4242 (python -m vllm) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 269 0 0 20 0 9 0 100 0 0"
    assert host_load.parse_process_ticks(line) == 731 + 269


def test_memory_pressure_is_the_some_line_s_total_and_load_the_first_average():
    pressure = "some avg10=0.00 avg60=0.10 avg300=0.05 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=99\n"
    assert host_load.parse_pressure(pressure) == 123456
    assert host_load.parse_pressure("") is None
    assert host_load.parse_loadavg("3.52 2.10 1.05 4/512 9999\n") == 3.52


def reading(at, busy, steal, total, own, stall=None, load=1.0):
    return Reading(at_s=at, busy=busy, steal=steal, total=total, own=own, memory_stall_us=stall, load=load, cores=2)


def test_other_processes_share_is_the_busy_time_the_run_s_processes_did_not_take():
    before = reading(0.0, busy=1000, steal=0, total=2000, own=300, stall=0)
    after = reading(10.0, busy=2500, steal=100, total=4000, own=1500, stall=2_000_000, load=3.0)
    state = host_load.state(before, after, gpu_foreign=None)
    assert state.foreign_cpu == pytest.approx((1500 - 1200) / 2000)
    assert state.steal == pytest.approx(0.05)
    assert state.memory_stall == pytest.approx(0.2)
    assert (state.load, state.cores, state.gpu_foreign) == (3.0, 2, None)
    assert state.flagged  # 15 % of the CPU to other work


def test_a_run_alone_on_its_host_is_not_flagged_and_its_share_never_goes_below_zero():
    before, after = reading(0.0, 0, 0, 0, 0), reading(5.0, 900, 0, 1000, 950)
    state = host_load.state(before, after)
    assert state.foreign_cpu == 0.0
    assert state.memory_stall is None
    assert not state.flagged


@pytest.mark.parametrize(
    ("foreign", "steal", "gpu", "flagged"),
    [(0.10, 0.0, None, False), (0.11, 0.0, None, True), (0.0, 0.06, None, True), (0.0, 0.0, 0.2, True),
     (None, None, None, False)],
)  # fmt: skip
def test_foreign_load_is_a_tenth_of_the_cpu_a_twentieth_stolen_or_a_tenth_of_the_gpu(foreign, steal, gpu, flagged):
    assert host_load.foreign_load(foreign, steal, gpu) is flagged


def test_gpu_use_by_others_leaves_out_the_run_s_own_processes():
    assert host_load.gpu_foreign_share({10: 40.0, 11: 30.0, 99: 20.0}, {10, 11}) == pytest.approx(0.2)
    assert host_load.gpu_foreign_share({}, {10}) is None


def test_blocks_under_different_host_states_are_told_apart():
    quiet = host_load.block_states({1: [0.01, 0.02], 2: [0.03]}, {1: False, 2: False})
    assert not quiet.differ
    assert quiet.sentence() == ""
    mixed = host_load.block_states({1: [0.01], 2: [0.40, 0.30]}, {1: False, 2: True})
    assert mixed.differ
    assert mixed.sentence() == (
        "blocks ran under different host states: foreign load in block(s) 2; other processes took 1%–35% of its CPU"
    )
    apart = host_load.block_states({1: [0.0], 2: [0.09], 3: [0.16]}, {})
    assert apart.differ  # none flagged, but 16 points apart
    assert apart.sentence().startswith("blocks ran under different host states: other processes took 0%–16%")
    loaded = host_load.block_states({1: [0.5], 2: [0.45]}, {1: True, 2: True})
    assert not loaded.differ  # every block under the same foreign load
    assert host_load.block_states({1: [None]}, {}).quietest is None
