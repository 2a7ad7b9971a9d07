"""The randomised block schedule: every arm once per block, on its own server, in a seeded order."""

from collections import Counter

from experiments.measurement.planning.schedule import block_orders, schedule


def test_every_arm_runs_every_level_once_per_block():
    slots = schedule(n_arms=3, levels=[1, 4, 16], blocks=3, seed=7)
    assert len(slots) == 3 * 3 * 3
    assert Counter((s.arm_index, s.block, s.level) for s in slots) == {
        (arm, block, level): 1 for arm in range(3) for block in (1, 2, 3) for level in (1, 4, 16)
    }


def test_blocks_run_one_after_another_and_an_arms_levels_stay_together():
    slots = schedule(n_arms=3, levels=[1, 4], blocks=2, seed=7)
    assert [s.block for s in slots] == sorted(s.block for s in slots)
    sessions = [(s.block, s.arm_index) for s in slots]
    # Each (block, arm) pair is one contiguous server session.
    changes = [i for i in range(1, len(sessions)) if sessions[i] != sessions[i - 1]]
    assert len(changes) == 2 * 3 - 1


def test_positions_are_the_run_order_within_the_block():
    slots = schedule(n_arms=3, levels=[1, 4], blocks=1, seed=7)
    arms, levels = block_orders(n_arms=3, levels=[1, 4], blocks=1, seed=7)[0]
    assert [s.arm_index for s in slots[::2]] == arms
    assert [s.block_position for s in slots[::2]] == [1, 2, 3]
    assert [s.level for s in slots[:2]] == levels
    assert [s.level_position for s in slots[:2]] == [1, 2]


def test_the_order_is_seeded_and_differs_between_blocks():
    first = block_orders(n_arms=4, levels=[1, 4, 16], blocks=3, seed=0)
    assert first == block_orders(n_arms=4, levels=[1, 4, 16], blocks=3, seed=0)
    assert first != block_orders(n_arms=4, levels=[1, 4, 16], blocks=3, seed=1)
    assert len({tuple(arms) for arms, _ in first}) > 1


def test_one_server_per_arm_runs_each_arm_through_all_blocks():
    slots = schedule(n_arms=2, levels=[1, 4], blocks=3, seed=3, server_per_block=False)
    arms = [s.arm_index for s in slots]
    assert arms == sorted(arms, key=arms.index)  # each arm's runs are contiguous
    assert [s.block for s in slots[:6]] == [1, 1, 2, 2, 3, 3]


def test_one_server_per_arm_keeps_the_first_blocks_arm_order_and_each_blocks_level_order():
    # Seed 0 draws, block 1: arms [2, 1, 0], levels [4, 1]; block 2: arms [1, 0, 2], levels [1, 4].
    assert block_orders(n_arms=3, levels=[1, 4], blocks=2, seed=0) == [([2, 1, 0], [4, 1]), ([1, 0, 2], [1, 4])]
    # One server per arm: the arms run in block 1's order (2, then 1, then 0: places 1, 2, 3
    # in every block), each through block 1 and block 2, each block's levels in that block's
    # order (4 then 1 in block 1, 1 then 4 in block 2: level places 1 and 2).
    slots = schedule(n_arms=3, levels=[1, 4], blocks=2, seed=0, server_per_block=False)
    assert [(s.arm_index, s.block, s.level, s.block_position, s.level_position) for s in slots] == [
        (2, 1, 4, 1, 1),
        (2, 1, 1, 1, 2),
        (2, 2, 1, 1, 1),
        (2, 2, 4, 1, 2),
        (1, 1, 4, 2, 1),
        (1, 1, 1, 2, 2),
        (1, 2, 1, 2, 1),
        (1, 2, 4, 2, 2),
        (0, 1, 4, 3, 1),
        (0, 1, 1, 3, 2),
        (0, 2, 1, 3, 1),
        (0, 2, 4, 3, 2),
    ]


def test_an_added_block_keeps_the_order_drawn_for_all_arms_closing_up_the_gaps():
    from experiments.measurement.planning.schedule import added_block, block_order

    order, levels = block_order(n_arms=5, levels=[1, 4], block=4, seed=3)
    slots = added_block(n_arms=5, levels=[1, 4], block=4, seed=3, arms={0, 2, 4})
    taken = [arm for arm in order if arm in {0, 2, 4}]
    assert [slot.arm_index for slot in slots if slot.level_position == 1] == taken
    assert [slot.block_position for slot in slots if slot.level_position == 1] == [1, 2, 3]
    assert [slot.level for slot in slots[:2]] == levels
    assert {slot.block for slot in slots} == {4}


def test_a_block_s_order_does_not_depend_on_how_many_blocks_follow():
    from experiments.measurement.planning.schedule import block_orders

    assert (
        block_orders(n_arms=4, levels=[1, 2, 8], blocks=3, seed=9)
        == block_orders(n_arms=4, levels=[1, 2, 8], blocks=8, seed=9)[:3]
    )
