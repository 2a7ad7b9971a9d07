"""Queueing an experiment's runs at their places in the randomised block schedule
(experiments/measurement/planning/schedule.py): every block at submission, or with blocks added until
settled the first ones, then one block at a time for the arms whose question is still open."""

from collections.abc import Mapping

from django.db.models import Max

from experiments.execution import block_claims
from experiments.measurement.deploy import batch_schedule
from experiments.measurement.planning.schedule import Slot, added_block, schedule
from experiments.models import Arm, Experiment, Run


def arm_servers(arms: list[Arm]) -> list[tuple[Arm, float | None]]:
    """What the block schedule shuffles: each arm's own server, then one server per length
    of an arm's synthetic acceptance sweep (its speculative config is a server flag). Without
    a sweep this is the arms themselves, so their schedule is what it always was."""
    return [(arm, None) for arm in arms] + [(arm, length) for arm in arms for length in arm.synthetic_sweep]


def _runs_create(experiment: Experiment, servers: list[tuple[Arm, float | None]], slots: list[Slot]) -> list[Run]:
    return Run.objects.bulk_create(
        Run(
            experiment=experiment,
            arm=servers[slot.arm_index][0],
            synthetic_acceptance_length=servers[slot.arm_index][1],
            concurrency=slot.level,
            repetition=slot.block,
            block_position=slot.block_position,
            level_position=slot.level_position,
        )
        for slot in slots
    )


def _servers(experiment: Experiment) -> list[tuple[Arm, float | None]]:
    return arm_servers(list(experiment.arms.order_by("position")))


def first_blocks_queue(*, experiment: Experiment) -> list[Run]:
    """The runs of the blocks queued at submission (Experiment.first_blocks). With a fresh
    server per arm and block, each block is the unit of dispatch (a Block row: block_claims.py);
    with one server per arm for all blocks the arms do not interleave, and one worker runs it all."""
    servers = _servers(experiment)
    slots = schedule(
        n_arms=len(servers),
        levels=experiment.concurrency_levels,
        blocks=experiment.first_blocks,
        seed=experiment.seed,
        server_per_block=experiment.server_per_block,
    )
    runs = _runs_create(experiment, servers, slots)
    if experiment.server_per_block:
        block_claims.blocks_create(experiment, {slot.block for slot in slots})
    return runs


def block_queue(
    *, experiment: Experiment, block: int, arm_ids: set[int], levels: Mapping[int, frozenset[int]] | None = None
) -> list[Run]:
    """One more block of a sequential design, for the arms in `arm_ids` (their own servers:
    a synthetic acceptance sweep and the draft calibration ran in the first blocks only). With
    `levels` (a break-even search), each arm runs the levels given for it; a level the
    experiment has not measured yet joins its concurrency levels."""
    if not experiment.adds_blocks or block > experiment.repetitions:
        raise ValueError(f"experiment {experiment.id} has no block {block} to add")
    if experiment.runs.filter(repetition=block).exists():
        raise ValueError(f"block {block} of experiment {experiment.id} is queued already")
    if levels is not None:
        _levels_add(experiment, set().union(*levels.values()) if levels else set())
    servers = _servers(experiment)
    taken = {index for index, (arm, length) in enumerate(servers) if arm.id in arm_ids and length is None}
    arms: set[int] | dict[int, frozenset[int]] = taken
    if levels is not None:
        arms = {index: levels[servers[index][0].id] for index in taken if levels.get(servers[index][0].id)}
    slots = added_block(
        n_arms=len(servers), levels=experiment.concurrency_levels, block=block, seed=experiment.seed, arms=arms
    )
    # An experiment that started before blocks were dispatched one by one goes on as it began.
    if block_claims.dispatched_by_block(experiment):
        block_claims.blocks_create(experiment, {block})
    return _runs_create(experiment, servers, slots)


def _levels_add(experiment: Experiment, levels: set[int]) -> None:
    """The search's new levels join the experiment's measured ones (kept sorted)."""
    new = levels - set(experiment.concurrency_levels)
    if new:
        experiment.concurrency_levels = sorted({*experiment.concurrency_levels, *new})
        experiment.save(update_fields=["concurrency_levels"])


def confirmation_arm_add(*, experiment: Experiment, arm_id: int, schedule: list[batch_schedule.Band]) -> Arm:
    """The arm that runs `schedule`, derived from arm `arm_id`'s settled words, so that the
    recommended --speculative-config is measured before anyone deploys it: the same method, k
    and settings, with num_speculative_tokens_per_batch_size, last in the arms' order."""
    source = experiment.arms.get(id=arm_id)
    position = (experiment.arms.aggregate(last=Max("position"))["last"] or 0) + 1
    return Arm.objects.create(
        experiment=experiment,
        position=position,
        label=f"{source.label[:70]} · derived schedule",
        method=source.method,
        num_speculative_tokens=source.num_speculative_tokens,
        params={**source.params, batch_schedule.KEY: batch_schedule.stored(schedule)},
        confirms=source,
    )
