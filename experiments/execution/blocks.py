"""Queueing an experiment's runs at their places in the randomised block schedule
(experiments/measurement/schedule.py): every block at submission, or with blocks added until
settled the first ones, then one block at a time for the arms whose question is still open."""

from experiments.measurement.schedule import Slot, added_block, schedule
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
    """The runs of the blocks queued at submission (Experiment.first_blocks)."""
    servers = _servers(experiment)
    slots = schedule(
        n_arms=len(servers),
        levels=experiment.concurrency_levels,
        blocks=experiment.first_blocks,
        seed=experiment.seed,
        server_per_block=experiment.server_per_block,
    )
    return _runs_create(experiment, servers, slots)


def block_queue(*, experiment: Experiment, block: int, arm_ids: set[int]) -> list[Run]:
    """One more block of a sequential design, for the arms in `arm_ids` (their own servers:
    a synthetic acceptance sweep and the draft calibration ran in the first blocks only)."""
    if not experiment.adds_blocks or block > experiment.repetitions:
        raise ValueError(f"experiment {experiment.id} has no block {block} to add")
    if experiment.runs.filter(repetition=block).exists():
        raise ValueError(f"block {block} of experiment {experiment.id} is queued already")
    servers = _servers(experiment)
    taken = {index for index, (arm, length) in enumerate(servers) if arm.id in arm_ids and length is None}
    slots = added_block(
        n_arms=len(servers), levels=experiment.concurrency_levels, block=block, seed=experiment.seed, arms=taken
    )
    return _runs_create(experiment, servers, slots)
