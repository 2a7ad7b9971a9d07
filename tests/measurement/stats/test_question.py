"""The question's primary cells and the two families of decisions (experiments/measurement/stats/question.py)
on runs built by hand.

The metric is the output throughput: a block's ratio is the arm's throughput over the
baseline's (higher is better), so a baseline at 100 tok/s and an arm at 100 e^x give the
block log ratio x. With 3 blocks of log ratios [m - d, m, m + d] the two-sided p-value is
1 - t / sqrt(t² + 2), t = m / (d / √3) (tests/measurement/stats/test_sequential.py).
"""

import math

import pytest

from experiments.measurement.stats import inference, question, sequential
from experiments.measurement.stats.intervals import RatioEstimate

METRIC = "output_throughput"
BASELINE, FAST, NULL, REPLICATE = 0, 1, 2, 9
# The per-cell method (old experiments replay it); the block model: tests/measurement/stats/test_block_decisions.py.
FIXED_3 = sequential.Design(
    max_blocks=3, sequential=False, margin=0.02, worthwhile_gain=0.05, method=sequential.PER_CELL_T
)
QUESTION = question.Question(metric=METRIC, levels=(4, 8), design=FIXED_3)


def runs(arm: int, level: int, *logs: float) -> list[inference.RunData]:
    return [
        inference.RunData(arm, level, block, throughputs={METRIC: 100 * math.exp(value)})
        for block, value in enumerate(logs, start=1)
    ]


def cell(arm: int, level: int, outcome: str, metric: str = METRIC) -> inference.CellResult:
    return inference.CellResult(arm, level, metric, RatioEstimate(None, None, None), outcome, 0, 0, 0)


def decision(key: tuple[int, int], outcome: str) -> question.Decision:
    return sequential.Decision(key, outcome, RatioEstimate(None, None, None), 0.95, 3, None)


def test_primary_cells_take_the_question_s_metric_and_the_per_cell_no_call_reasons():
    data = runs(BASELINE, 4, 0, 0, 0) + runs(FAST, 4, 0.10, 0.12, 0.14) + runs(NULL, 4, 0, 0, 0)
    cells = [
        cell(FAST, 4, "faster"),
        cell(NULL, 4, "failures differ"),
        cell(FAST, 8, "stream distorted", metric="tpot"),  # another metric's cell: not this one's
        cell(NULL, 8, "too few blocks"),
    ]
    primary = question.primary_cells(data, cells, baseline=BASELINE, arms=[FAST, NULL], question=QUESTION)
    assert [(p.key, p.blocked) for p in primary] == [
        ((FAST, 4), None), ((FAST, 8), "no data"), ((NULL, 4), "failures differ"), ((NULL, 8), None),
    ]  # fmt: skip
    assert primary[0].ratios == pytest.approx({1: math.exp(0.10), 2: math.exp(0.12), 3: math.exp(0.14)})
    assert primary[1].ratios == {}  # no runs at level 8
    inconclusive = question.primary_cells(
        data, [cell(FAST, 4, "inconclusive")], baseline=BASELINE, arms=[FAST], question=QUESTION
    )
    assert inconclusive[0].blocked is None


def test_the_candidates_and_the_replicate_are_families_of_their_own():
    one_level = question.Question(metric=METRIC, levels=(4,), design=FIXED_3)
    data = (
        runs(BASELINE, 4, 0, 0, 0)
        + runs(FAST, 4, 0.02, 0.03, 0.04)  # p = 0.0351: within 0.05 alone, not within 0.05 / 2
        + runs(REPLICATE, 4, -0.04, -0.02, 0.0)  # interval [0.948, 1.014]: below 1.05
    )
    cells = [cell(FAST, 4, "faster"), cell(REPLICATE, 4, "inconclusive")]
    decided = question.question_decisions(
        data, cells, baseline=BASELINE, candidates=[FAST], replicate=REPLICATE, question=one_level, final=True
    )
    # The candidate is tested at the whole 5 %: the replicate does not share its family.
    assert [(d.key, d.outcome, d.blocks) for d in decided.candidates] == [((FAST, 4), "faster", 3)]
    t = 0.03 / (0.01 / math.sqrt(3))
    assert decided.candidates[0].p_value == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-6)
    # As a candidate it would stop as not worth it; the replicate is no candidate.
    assert [(d.key, d.outcome) for d in decided.replicate] == [((REPLICATE, 4), "inconclusive")]
    as_candidate = question.question_decisions(
        data, cells, baseline=BASELINE, candidates=[REPLICATE], replicate=None, question=one_level, final=True
    )
    assert [d.outcome for d in as_candidate.candidates] == ["not worth it"]
    assert as_candidate.replicate == []


def test_the_blocks_run_are_the_highest_block_of_any_run():
    # The baseline ran a third block the arm has not: the look after 3 blocks is taken, and the
    # arm's two blocks are too few to call, so its cell is inconclusive rather than too few blocks.
    data = runs(BASELINE, 4, 0, 0, 0) + runs(FAST, 4, 0.10, 0.12)
    one_level = question.Question(metric=METRIC, levels=(4,), design=FIXED_3)
    decided = question.question_decisions(
        data, [cell(FAST, 4, "too few blocks")], baseline=BASELINE, candidates=[FAST], replicate=None,
        question=one_level, final=True,
    )  # fmt: skip
    assert [(d.outcome, d.blocks) for d in decided.candidates] == [("inconclusive", 2)]


def test_what_the_decisions_say_about_the_experiment():
    decided = question.QuestionDecisions(
        candidates=[
            decision((1, 4), "faster"), decision((2, 4), "open"), decision((2, 8), "inconclusive"),
            decision((3, 4), "inconclusive"), decision((4, 4), "not worth it"),
        ],
        replicate=[decision((9, 4), "open")],
    )  # fmt: skip
    assert decided.unsettled
    assert decided.open_arms() == [2, 3]
    assert decided.by_key()[(9, 4)].outcome == "open"
    assert sorted(decided.by_key()) == [(1, 4), (2, 4), (2, 8), (3, 4), (4, 4), (9, 4)]
    assert decided.for_cell(1, 4, METRIC, METRIC).outcome == "faster"
    assert decided.for_cell(1, 4, "tpot", METRIC) is None
    assert decided.for_cell(5, 4, METRIC, METRIC) is None
    # An open replicate cell does not keep the experiment going: it is no candidate.
    settled = question.QuestionDecisions([decision((1, 4), "equivalent")], [decision((9, 4), "open")])
    assert not settled.unsettled
    assert settled.open_arms() == []
    assert question.QuestionDecisions([decision((1, 4), "inconclusive")], []).unsettled


def test_before_any_run_every_primary_cell_has_no_data():
    decided = question.question_decisions(
        [], [], baseline=BASELINE, candidates=[FAST], replicate=REPLICATE, question=QUESTION, final=False
    )
    assert [(d.key, d.outcome, d.blocks) for d in (*decided.candidates, *decided.replicate)] == [
        ((FAST, 4), "no data", 0), ((FAST, 8), "no data", 0), ((REPLICATE, 4), "no data", 0),
        ((REPLICATE, 8), "no data", 0),
    ]  # fmt: skip


def test_a_cell_no_look_settled_is_open_until_the_experiment_stops():
    sequential_5 = question.Question(
        metric=METRIC, levels=(4,),
        design=sequential.Design(
            max_blocks=5, sequential=True, margin=0.02, worthwhile_gain=0.05, method=sequential.PER_CELL_T
        ),
    )  # fmt: skip
    data = runs(BASELINE, 4, 0, 0, 0) + runs(NULL, 4, -0.05, 0.0, 0.05)
    outcome = {
        final: question.question_decisions(
            data, [cell(NULL, 4, "inconclusive")], baseline=BASELINE, candidates=[NULL], replicate=None,
            question=sequential_5, final=final,
        ).candidates[0].outcome
        for final in (False, True)
    }  # fmt: skip
    assert outcome == {False: "open", True: "inconclusive"}
