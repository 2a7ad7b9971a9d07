"""The joint word per arm and level (experiments/measurement/stats/objective.py) on hand-computed
cases: a guard's one-sided test at the family's share of alpha, the words from a primary decision
and its guards, and the capacity guard where an arm queued and the baseline did not."""

import pytest

from experiments.measurement.stats import objective, sequential
from experiments.measurement.stats.intervals import block_interval
from experiments.measurement.stats.objective import Guard

FIXED_3 = sequential.Design(max_blocks=3, sequential=False, margin=0.02, worthwhile_gain=0.07)
KEY = (7, 4)


def _decision(outcome: str, ratios=(1.3, 1.25, 1.35)) -> sequential.Decision:
    return sequential.Decision(KEY, outcome, block_interval(ratios), 0.95, len(ratios), 0.01)


def _guard(status: str, metric: str = "e2e") -> objective.GuardLook:
    return objective.GuardLook(metric, 0.05, status, block_interval([1.0, 1.0]), 0.9, 2)


def test_a_guard_is_shown_non_inferior_by_its_one_sided_bound_at_the_familys_share():
    """Blocks 1.2, 1.1, 1.15 (log mean 0.1376, log sd 0.0435): one look of a fixed design, alone in
    its family, a one-sided 5 % bound = the 90 % interval's low end, 1.0680 > 0.95. In a family
    of four: 1.25 % a side, the 97.5 % interval [0.9834, 1.3431]: still above 0.95."""
    ratios = {1: 1.2, 2: 1.1, 3: 1.15}
    alone = objective.guard_look(ratios, Guard("e2e"), design=FIXED_3, family=1, blocks=3, own_look=3, looks=(3,))
    assert alone.status == objective.SHOWN
    assert alone.confidence == pytest.approx(0.90)
    assert alone.estimate.lo == pytest.approx(1.06799, abs=1e-4)

    shared = objective.guard_look(ratios, Guard("e2e"), design=FIXED_3, family=4, blocks=3, own_look=3, looks=(3,))
    assert shared.confidence == pytest.approx(0.975)
    assert (shared.estimate.lo, shared.estimate.hi) == (
        pytest.approx(0.98339, abs=1e-4),
        pytest.approx(1.34314, abs=1e-4),
    )
    assert shared.status == objective.SHOWN

    tight = objective.guard_look(
        ratios, Guard("e2e", margin=0.01), design=FIXED_3, family=4, blocks=3, own_look=3, looks=(3,)
    )
    assert tight.status == objective.UNSURE  # 0.9834 is not above 1 − 1 %


def test_a_guard_below_its_margin_is_worse():
    """0.85, 0.88, 0.86: the 90 % interval [0.8379, 0.8893] lies below 0.95."""
    look = objective.guard_look({1: 0.85, 2: 0.88, 3: 0.86}, Guard("output_throughput"), design=FIXED_3,
                                family=1, blocks=3, own_look=3, looks=(3,))  # fmt: skip
    assert look.status == objective.WORSE
    assert look.estimate.hi == pytest.approx(0.88931, abs=1e-4)


def test_one_block_shows_nothing():
    look = objective.guard_look({1: 2.0}, Guard("e2e"), design=FIXED_3, family=1, blocks=3, own_look=3, looks=(3,))
    assert look.status == objective.UNSURE


@pytest.mark.parametrize(
    ("primary", "guards", "more", "word"),
    [
        (sequential.FASTER, [objective.SHOWN, objective.SHOWN], False, objective.PAYS),
        (sequential.FASTER, [objective.SHOWN, objective.WORSE], False, objective.COSTS),
        (sequential.FASTER, [objective.SHOWN, objective.UNSURE], True, objective.OPEN),
        (sequential.FASTER, [objective.UNSURE], False, objective.INCONCLUSIVE),
        (sequential.FASTER, [], False, objective.PAYS),  # no guards: pays is faster
        (sequential.OPEN, [objective.WORSE], True, objective.COSTS),  # a guard lost: no need to wait
        (sequential.OPEN, [objective.SHOWN], True, objective.OPEN),
        (sequential.SLOWER, [objective.SHOWN], False, objective.NOT_WORTH_IT),
        (sequential.EQUIVALENT, [], False, objective.NOT_WORTH_IT),
        (sequential.NOT_WORTH_IT, [objective.UNSURE], True, objective.NOT_WORTH_IT),
        (sequential.INCONCLUSIVE, [objective.SHOWN], False, objective.INCONCLUSIVE),
        ("failures differ", [objective.SHOWN], False, "failures differ"),
    ],
)
def test_the_joint_word(primary, guards, more, word):
    looks = [_guard(status, f"m{i}") for i, status in enumerate(guards)]
    assert objective.joint_word(_decision(primary), looks, more_blocks=more) == word


def _cells(*, blocked=None):
    return [sequential.PrimaryCell(KEY, {1: 1.3, 2: 1.25, 3: 1.35}, blocked)]


def test_the_capacity_guard_joins_where_the_arm_queued_alone():
    """Faster in TPOT, E2E shown within its margin, but the arm queued where the baseline did not:
    its output throughput (0.85, 0.88, 0.86) is tested too, and costs."""
    ratios = {KEY: {"e2e": {1: 1.2, 2: 1.1, 3: 1.15}, "output_throughput": {1: 0.85, 2: 0.88, 3: 0.86}}}
    decided = [_decision(sequential.FASTER)]
    common = {"design": FIXED_3, "blocks_run": 3, "final": True, "primary_metric": "server_tpot"}

    plain = objective.joint_decisions(_cells(), decided, [Guard("e2e")], ratios, **common)
    queued = objective.joint_decisions(
        _cells(), decided, [Guard("e2e")], ratios, capacity_differs=frozenset({KEY}), **common
    )

    assert plain[0].word == objective.PAYS
    (joint,) = queued
    assert joint.word == objective.COSTS
    assert [(g.metric, g.status, g.implied) for g in joint.guards] == [
        ("e2e", objective.SHOWN, False),
        ("output_throughput", objective.WORSE, True),
    ]
    assert [g.metric for g in joint.blocking] == ["output_throughput"]


def test_a_guard_is_fixed_at_the_first_look_that_settles_it():
    """A sequential design of 5: the guard's blocks 1.3, 1.3, 1.3 show it at look 3; later
    blocks that would not (0.5, 0.5) do not undo it."""
    design = sequential.Design(max_blocks=5, sequential=True, margin=0.02, worthwhile_gain=0.07)
    ratios = {KEY: {"e2e": {1: 1.3, 2: 1.31, 3: 1.29, 4: 0.5, 5: 0.5}}}
    cells = [sequential.PrimaryCell(KEY, dict.fromkeys(range(1, 6), 1.3))]
    (joint,) = objective.joint_decisions(cells, [_decision(sequential.FASTER)], [Guard("e2e")], ratios,
                                         design=design, blocks_run=5, final=True)  # fmt: skip
    assert joint.guards[0].blocks == 3
    assert joint.word == objective.PAYS


def test_a_preset_leaves_out_goodput_without_an_slo_and_the_primary_itself():
    shared = objective.PRESETS["shared"]
    assert [g.metric for g in objective.guards_for(shared.guards, primary=shared.primary, has_slo=False)] == ["e2e_p95"]
    assert [g.metric for g in objective.guards_for(shared.guards, primary="e2e_p95", has_slo=True)] == ["goodput"]


# ---------------------------------------------------------------- looks, late cells, the words' timing

SEQUENTIAL_5 = sequential.Design(
    max_blocks=5, sequential=True, margin=0.02, worthwhile_gain=0.07, method=sequential.PER_CELL_T
)
STEADY = {1: 1.2, 2: 1.1, 3: 1.15, 4: 1.18, 5: 1.12}


def test_a_guard_is_tested_at_its_looks_level_of_the_spending_boundary():
    """Looks after 3, 4 and 5 blocks, a family of four: one-sided 0.28 %, 0.42 % and 0.79 % on the
    spending boundary (Pocock's would be 0.53 % at each): the early look is the strictest."""
    levels = {}
    for look in (3, 4, 5):
        found = objective.guard_look(STEADY, Guard("e2e"), design=SEQUENTIAL_5, family=4, blocks=look,
                                     own_look=look, looks=(3, 4, 5))  # fmt: skip
        levels[look] = (1 - found.confidence) / 2
        assert found.blocks == look
    assert levels == {3: pytest.approx(0.002839, abs=2e-5), 4: pytest.approx(0.004239, abs=2e-5),
                      5: pytest.approx(0.007884, abs=2e-5)}  # fmt: skip


def _joint(cell, outcome, ratios, **kwargs):
    (joint,) = objective.joint_decisions([cell], [_decision(outcome)], [Guard("e2e")], {cell.key: ratios}, **kwargs)
    return joint


def test_a_late_cell_tests_its_guards_at_its_own_looks():
    """A level a search added in block 3 of a 5-block design: its own first look is after its third
    block (block 5 of the experiment); before that its guard is not shown, and nothing is tested."""
    late = sequential.PrimaryCell(KEY, {3: 1.3, 4: 1.3, 5: 1.3}, None, entered=3)
    ratios = {"e2e": {3: 1.2, 4: 1.1, 5: 1.15}}
    before = _joint(late, sequential.OPEN, ratios, design=SEQUENTIAL_5, blocks_run=4, final=False)
    (guard,) = before.guards
    assert (guard.metric, guard.margin, guard.status, guard.blocks, guard.confidence) == (
        "e2e",
        0.05,
        "not shown",
        0,
        0.0,
    )
    assert guard.estimate.point == pytest.approx((1.2 * 1.1 * 1.15) ** (1 / 3))
    after = _joint(late, sequential.FASTER, ratios, design=SEQUENTIAL_5, blocks_run=5, final=True)
    assert (after.guards[0].status, after.guards[0].blocks, after.word) == (objective.SHOWN, 3, objective.PAYS)
    assert (after.key, after.primary.outcome) == (KEY, sequential.FASTER)


def test_a_fixed_design_stopped_short_tests_its_guards_at_what_it_has():
    fixed_5 = sequential.Design(max_blocks=5, sequential=False, margin=0.02, worthwhile_gain=0.07)
    cell = sequential.PrimaryCell(KEY, dict.fromkeys((1, 2, 3, 4), 1.3))
    ratios = {"e2e": {1: 1.2, 2: 1.1, 3: 1.15, 4: 1.18}}
    stopped = _joint(cell, sequential.FASTER, ratios, design=fixed_5, blocks_run=4, final=True)
    assert (stopped.guards[0].status, stopped.guards[0].blocks) == (objective.SHOWN, 4)
    running = _joint(cell, sequential.OPEN, ratios, design=fixed_5, blocks_run=4, final=False)
    assert (running.guards[0].status, running.guards[0].blocks) == (objective.UNSURE, 0)


@pytest.mark.parametrize(
    ("blocks_run", "final", "word"),
    [(3, False, objective.OPEN), (3, True, objective.INCONCLUSIVE), (5, False, objective.INCONCLUSIVE)],
)
def test_a_faster_cell_whose_guard_is_unsure_stays_open_while_blocks_may_follow(blocks_run, final, word):
    cell = sequential.PrimaryCell(KEY, dict.fromkeys(range(1, 6), 1.3))
    wide = {"e2e": {1: 0.6, 2: 1.6, 3: 1.0, 4: 0.7, 5: 1.5}}
    assert _joint(cell, sequential.FASTER, wide, design=SEQUENTIAL_5, blocks_run=blocks_run, final=final).word == word


def test_no_capacity_guard_is_added_where_capacity_is_the_primary_or_a_guard_already():
    cell = sequential.PrimaryCell(KEY, {1: 1.3, 2: 1.25, 3: 1.35})
    differs = frozenset({KEY})
    common = {"design": FIXED_3, "blocks_run": 3, "final": True, "capacity_differs": differs}
    ratios = {KEY: {"e2e": STEADY}}
    (on_capacity,) = objective.joint_decisions([cell], [_decision(sequential.FASTER)], [Guard("e2e")], ratios,
                                               primary_metric="output_throughput", **common)  # fmt: skip
    assert [g.metric for g in on_capacity.guards] == ["e2e"]
    guarded = [Guard("e2e"), Guard("output_throughput")]
    (already,) = objective.joint_decisions([cell], [_decision(sequential.FASTER)], guarded, ratios,
                                           primary_metric="server_tpot", **common)  # fmt: skip
    assert [(g.metric, g.implied) for g in already.guards] == [("e2e", False), ("output_throughput", False)]


def test_a_cell_without_guard_ratios_has_its_guards_not_shown():
    cell = sequential.PrimaryCell(KEY, {1: 1.3, 2: 1.25, 3: 1.35})
    (joint,) = objective.joint_decisions([cell], [_decision(sequential.FASTER)], [Guard("e2e")], {},
                                         design=FIXED_3, blocks_run=3, final=True)  # fmt: skip
    assert [(g.metric, g.status) for g in joint.guards] == [("e2e", objective.UNSURE)]
    assert joint.word == objective.INCONCLUSIVE


def _guard_words(cells, guard_ratios, method):
    decisions = [sequential.Decision(cell.key, sequential.FASTER, block_interval((1.3, 1.25, 1.35)), 0.95, 3, 0.01)
                 for cell in cells]  # fmt: skip
    design = sequential.Design(max_blocks=3, sequential=False, margin=0.02, worthwhile_gain=0.07, method=method)
    joint = objective.joint_decisions(cells, decisions, [Guard("e2e")], guard_ratios, design=design, blocks_run=3,
                                      final=True)  # fmt: skip
    return {j.word for j in joint}, {round(j.guards[0].estimate.lo, 3) for j in joint}


def test_on_the_block_model_a_guard_takes_the_spread_pooled_over_the_cells():
    """Four cells of one arm, three blocks each, guard ratios 0.98, 1.0 and 1.02 in a different
    order in each cell. Alone, each cell's guard has 2 degrees of freedom at a one-sided 5 %/4
    (t = 6.21 on the log sd 0.02 over sqrt(3)): its low end 0.930 lies below the margin's 0.95,
    not shown. Pooled over the four cells (the block model) the same blocks show it. Where every
    cell has the same blocks (one shock shared by all), pooling buys no degrees of freedom."""
    orders = [(1.0, 0.98, 1.02), (0.98, 1.02, 1.0), (1.02, 1.0, 0.98), (1.0, 1.02, 0.98)]
    cells = [sequential.PrimaryCell((7, level), {1: 1.3, 2: 1.25, 3: 1.35}) for level in (1, 2, 4, 8)]
    own = {cell.key: {"e2e": dict(enumerate(order, start=1))} for cell, order in zip(cells, orders, strict=True)}
    words, lows = _guard_words(cells, own, sequential.PER_CELL_T)
    assert words == {objective.INCONCLUSIVE}
    assert len(lows) == 1
    assert lows.pop() == pytest.approx(0.930, abs=2e-3)
    assert _guard_words(cells, own, sequential.BLOCK_MODEL)[0] == {objective.PAYS}
    shared = {cell.key: {"e2e": {1: 1.0, 2: 0.98, 3: 1.02}} for cell in cells}
    assert _guard_words(cells, shared, sequential.BLOCK_MODEL)[0] == {objective.INCONCLUSIVE}
