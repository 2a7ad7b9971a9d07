"""Whether an experiment with blocks added until settled runs another block, for which arms
and, in a break-even search, at which levels (experiments/measurement/stats/question.py decides its
primary cells, experiments/measurement/planning/planner.py places the search's levels).

After every block from the third on (from the first on in a search), the worker asks
`next_step`: another block while a primary cell is open (in a search: while an arm's search
has levels to run), the maximum is not reached and the device-minute budget allows it; the
page states the same step's reason once the experiment ends.

With a budget, a block may not afford every arm that wants one. The arms are then taken in
order of the fewest blocks their open cells are expected to need to settle (intervals.blocks_to_settle,
at the current estimate and spread): a device-minute spent on an arm that can settle within
what is left buys a word, one spent on an arm that cannot buys nothing. The baseline (and the
A/A replicate) run in every block: every ratio needs them.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from django.db.models import Max

from experiments.analysis import device_time
from experiments.measurement.deploy import batch_schedule
from experiments.measurement.planning import planner
from experiments.measurement.stats import intervals, question, sequential
from experiments.models import Arm, EnvironmentSnapshot, Experiment, Run

SETTLED = "settled"
SEARCHED = "searched"
MAXIMUM = "maximum"
BUDGET = "budget"
FIXED = "fixed"

STOP_REASON = {
    SETTLED: "every primary cell was settled",
    SEARCHED: "every arm's break-even search ended (found at the resolution, none in the range, or no level left "
    "to add)",
    MAXIMUM: "the maximum of {max_blocks} blocks was reached with primary cells still open",
    BUDGET: "another block would have passed the budget of {budget:g} device-minutes",
    FIXED: "a fixed design runs every block it asked for",
}
UNKNOWN_BLOCKS = 99  # an arm whose open cells give no estimate of the blocks they need goes last


@dataclass(frozen=True)
class Confirmation:
    """A confirmation arm to add: it runs `schedule`, derived from arm `arm`'s settled words, at `levels`."""

    arm: int
    schedule: list[batch_schedule.Band]
    levels: frozenset[int]


@dataclass(frozen=True)
class Step:
    """What comes after the blocks run so far: `block` to add (None: none) for `arm_ids`,
    and why the experiment stops when it does. In a break-even search `levels` gives each
    arm's levels in that block, `searches` each candidate's search, `confirm` the
    confirmation arms to add before it."""

    blocks_run: int
    device_minutes: float
    block: int | None = None
    arm_ids: frozenset[int] = frozenset()
    stop: str = ""
    levels: Mapping[int, frozenset[int]] | None = None
    searches: Mapping[int, planner.ArmSearch] = field(default_factory=dict)
    confirm: tuple[Confirmation, ...] = ()
    left_out: tuple[int, ...] = ()  # arms that wanted the block but did not fit the budget
    blocks: int = 1  # blocks alike to add, numbered from `block` on (a fleet's idle workers: issue 38)

    def stop_sentence(self, experiment: Experiment) -> str:
        return STOP_REASON[self.stop].format(
            max_blocks=experiment.repetitions, budget=experiment.max_device_minutes or 0
        )


def session_minutes(experiment: Experiment, used: float) -> float:
    """The mean device-minutes of one server session so far (an arm in a block, not waiting in the
    queue): what one more arm in the next block is expected to cost."""
    sessions = experiment.runs.exclude(status=Run.Status.QUEUED).values("arm_id", "repetition").distinct().count()
    return used / sessions if sessions else 0.0


def sessions_pending(experiment: Experiment) -> int:
    """The server sessions of the blocks in flight that have not begun: the budget counts them as
    spent (issue 38), so that blocks added beside them cannot pass it together."""
    return experiment.runs.filter(status=Run.Status.QUEUED).values("arm_id", "repetition").distinct().count()


def control_arms(experiment: Experiment) -> set[int]:
    """The baseline and the A/A replicate: every block runs them, every ratio needs them."""
    return set(experiment.arms.filter(method=Arm.Method.BASELINE, is_calibration=False).values_list("id", flat=True))


def _words(decided: question.QuestionDecisions) -> dict[int, dict[int, planner.Word]]:
    """Each candidate's measured levels as the search reads them."""
    words: dict[int, dict[int, planner.Word]] = {}
    for decision in decided.candidates:
        arm, level = decision.key
        words.setdefault(arm, {})[level] = planner.Word(decision.outcome, decision.estimate.point)
    return words


def search_plans(
    experiment: Experiment, decided: question.QuestionDecisions, blocks_run: int
) -> dict[int, planner.ArmSearch]:
    """Each candidate arm's break-even search after the blocks run so far ({} when the
    experiment is no search)."""
    search = experiment.search_range
    if search is None:
        return {}
    lean = 1 + experiment.worthwhile_gain
    return {
        arm: planner.plan(search, words, blocks_run=blocks_run, max_blocks=experiment.repetitions, lean=lean)
        for arm, words in _words(decided).items()
    }


@dataclass(frozen=True)
class Claim:
    """An arm that wants the next block, at these levels: one of the experiment's arms, or a
    confirmation arm to add."""

    levels: frozenset[int]
    arm: int | None = None
    confirmation: Confirmation | None = None


def _open_levels(decisions: list[question.Decision]) -> dict[int, frozenset[int]]:
    """{arm: its levels still open} over these decisions."""
    levels: dict[int, set[int]] = {}
    for decision in decisions:
        if decision.open:
            levels.setdefault(decision.key[0], set()).add(decision.key[1])
    return {arm: frozenset(found) for arm, found in levels.items()}


def _claims(
    experiment: Experiment, decided: question.QuestionDecisions, searches: Mapping[int, planner.ArmSearch],
    confirm: tuple[Confirmation, ...],
) -> list[Claim]:  # fmt: skip
    """The arms that want another block: in a search, each search's levels to run, the
    confirmation arms' open levels and the confirmations due; else every level of the arms
    with an open cell (as before the search existed)."""
    if experiment.search_range is None:
        levels = frozenset(experiment.concurrency_levels)
        return [Claim(levels, arm) for arm in decided.open_arms()]
    running = {arm: search.run for arm, search in searches.items() if search.run} | _open_levels(decided.confirmation)
    return [Claim(levels, arm) for arm, levels in running.items()] + [Claim(c.levels, None, c) for c in confirm]


def _blocks_needed(decided: question.QuestionDecisions, claim: Claim, margin: float) -> int:
    """The fewest further blocks any of the claim's open cells is expected to need; a level
    not measured yet (a confirmation's, an added one) needs its first look's blocks."""
    by_key = decided.by_key()
    needs = []
    for level in claim.levels:
        decision = by_key.get((claim.arm, level)) if claim.arm is not None else None
        if decision is None:
            needs.append(sequential.FIRST_LOOK)
            continue
        total = decision.to_settle or intervals.blocks_to_settle(decision.estimate, margin)
        needs.append(UNKNOWN_BLOCKS if total is None else max(1, total - decision.blocks))
    return min(needs, default=UNKNOWN_BLOCKS)


def _affordable(
    experiment: Experiment, decided: question.QuestionDecisions, claims: list[Claim], used: float, controls: int
) -> tuple[list[Claim], int]:
    """The claims the budget affords in the next block, those closest to settling first, and how
    many such blocks it affords (the sessions of the blocks in flight counted as spent)."""
    budget = experiment.max_device_minutes
    if budget is None or not used:
        return claims, UNKNOWN_BLOCKS
    per_session = session_minutes(experiment, used)
    left = budget - used - (sessions_pending(experiment) + controls) * per_session
    chosen = []
    for claim in sorted(claims, key=lambda claim: _blocks_needed(decided, claim, experiment.equivalence_margin)):
        if left >= per_session:
            chosen.append(claim)
            left -= per_session
    if not chosen:
        return [], 0
    block = (controls + len(chosen)) * per_session
    return chosen, (1 + int(left // block)) if block > 0 else UNKNOWN_BLOCKS


def vllm_runs_schedules(experiment: Experiment) -> bool:
    """Whether the vLLM the experiment's runs recorded takes num_speculative_tokens_per_batch_size."""
    versions = set(
        EnvironmentSnapshot.objects.filter(run__experiment=experiment).values_list("vllm_version", flat=True)
    )
    return bool(versions) and all(batch_schedule.supported(version) for version in versions)


def derived_schedule(experiment: Experiment, arm: Arm, search: planner.ArmSearch) -> list[batch_schedule.Band] | None:
    """The batch-size schedule of k a found break-even gives the arm (batch_schedule.derive: k up
    to the geometric mean of the bracket's levels, 0 above, up to max_num_seqs or the range's
    top), or None when its search found none."""
    below, above = search.settled.below, search.settled.above
    if search.state != planner.FOUND or below is None or above is None:
        return None
    outcomes = {below: sequential.FASTER, above: sequential.NOT_WORTH_IT}
    max_batch = max(experiment.max_num_seqs or 0, experiment.search_high or 0)
    return batch_schedule.derive(outcomes, k=arm.num_speculative_tokens or 1, max_batch=max_batch)


def confirmations_due(
    experiment: Experiment, searches: Mapping[int, planner.ArmSearch], blocks_run: int
) -> tuple[Confirmation, ...]:
    """The confirmation arms to add: for each arm whose search found its break-even, the schedule
    derived from its settled words, once, when the worker's vLLM runs schedules and enough
    blocks are left for the confirmation's first look."""
    if experiment.repetitions - blocks_run < sequential.FIRST_LOOK or not vllm_runs_schedules(experiment):
        return ()
    confirmed = set(experiment.arms.exclude(confirms=None).values_list("confirms_id", flat=True))
    due = []
    for arm in experiment.arms.filter(id__in=searches).exclude(id__in=confirmed):
        search = searches[arm.id]
        schedule = derived_schedule(experiment, arm, search)
        if schedule is not None and search.settled.below is not None and search.settled.above is not None:
            due.append(Confirmation(arm.id, schedule, frozenset({search.settled.below, search.settled.above})))
    return tuple(due)


def next_step(experiment: Experiment, decided: question.QuestionDecisions, *, room: int = 1) -> Step:
    """The block to add next, or why none is added, from the primary cells' decisions over
    the blocks run so far (experiments/analysis/primary.py, final=False). On a fleet (issue 38)
    up to `room` blocks alike may be added at once (Step.blocks), one per idle worker of the
    experiment's class, within the maximum and the budget."""
    blocks_run = experiment.runs.aggregate(last=Max("repetition"))["last"] or 0
    used = device_time.device_minutes(experiment)
    if not experiment.adds_blocks:
        return Step(blocks_run, used, stop=FIXED)
    searches = search_plans(experiment, decided, blocks_run)
    confirm = confirmations_due(experiment, searches, blocks_run) if searches else ()
    claims = _claims(experiment, decided, searches, confirm)
    if not claims:
        return Step(blocks_run, used, stop=SEARCHED if searches else SETTLED, searches=searches)
    if blocks_run >= experiment.repetitions:
        return Step(blocks_run, used, stop=MAXIMUM, searches=searches)
    controls = set(
        experiment.arms.filter(method=Arm.Method.BASELINE, is_calibration=False).values_list("id", flat=True)
    )
    chosen, affordable = _affordable(experiment, decided, claims, used, len(controls))
    if not chosen:
        return Step(blocks_run, used, stop=BUDGET, searches=searches)
    arms = {claim.arm: claim.levels for claim in chosen if claim.arm is not None}
    levels = None
    if searches:
        union = frozenset().union(*(claim.levels for claim in chosen))
        levels = dict.fromkeys(controls, union) | arms
    return Step(
        blocks_run, used, block=blocks_run + 1, arm_ids=frozenset(controls | set(arms)), levels=levels,
        searches=searches, confirm=tuple(claim.confirmation for claim in chosen if claim.confirmation),
        left_out=tuple(claim.arm for claim in claims if claim not in chosen and claim.arm is not None),
        blocks=max(1, min(room, affordable, experiment.repetitions - blocks_run)),
    )  # fmt: skip
