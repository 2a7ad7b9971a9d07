"""The order in which an experiment's runs execute: randomised blocks.

Each repetition is a block. In a block every arm runs once, on a freshly started server,
the arms in a random order; on each server the concurrency levels run in an order shared
by the block's arms. Both orders are drawn from the experiment's seed, so they are
reproducible, and differ from block to block, so that drift of the host over time and the
position of an arm in its block turn into noise instead of bias.

With one server per arm for the whole experiment (`server_per_block=False`) the arms
cannot interleave: each arm runs all its blocks on its server, the arms in one random
order. Plain Python, no Django.
"""

import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """Where one run sits in the schedule; positions are 1-based."""

    arm_index: int
    block: int
    level: int
    block_position: int
    level_position: int


def _rng(seed: int, block: int) -> random.Random:
    # A string seed is hashed the same way on every platform and Python version.
    return random.Random(f"specdash-schedule:{seed}:{block}")


def block_order(*, n_arms: int, levels: list[int], block: int, seed: int) -> tuple[list[int], list[int]]:
    """One block's arm indices in run order, and its levels in run order. Each block draws
    from a generator of its own, so a block's order does not depend on how many follow."""
    rng = _rng(seed, block)
    arms = list(range(n_arms))
    rng.shuffle(arms)
    block_levels = list(levels)
    rng.shuffle(block_levels)
    return arms, block_levels


def block_orders(*, n_arms: int, levels: list[int], blocks: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Per block (in block order): the arm indices in run order, and the levels in run order."""
    return [block_order(n_arms=n_arms, levels=levels, block=block, seed=seed) for block in range(1, blocks + 1)]


def added_block(
    *, n_arms: int, levels: list[int], block: int, seed: int, arms: set[int] | Mapping[int, Collection[int]]
) -> list[Slot]:
    """A block added to a sequential design for some of the arms (indices into the n_arms
    of the schedule): they keep the order the block draws for all, closing up the gaps. With
    a mapping, each arm runs only its own levels (a break-even search), in the order the
    block draws for `levels`, closing up the gaps there too."""
    order, block_levels = block_order(n_arms=n_arms, levels=levels, block=block, seed=seed)
    taken = [arm for arm in order if arm in arms]
    own = arms if isinstance(arms, Mapping) else dict.fromkeys(taken, levels)
    return [
        Slot(arm, block, level, arm_place, level_place)
        for arm_place, arm in enumerate(taken, start=1)
        for level_place, level in enumerate((level for level in block_levels if level in own[arm]), start=1)
    ]


def schedule(*, n_arms: int, levels: list[int], blocks: int, seed: int, server_per_block: bool = True) -> list[Slot]:
    """Every run of the experiment as a Slot, in execution order."""
    orders = block_orders(n_arms=n_arms, levels=levels, blocks=blocks, seed=seed)
    if server_per_block:
        return [
            Slot(arm, block, level, arm_place, level_place)
            for block, (arms, block_levels) in enumerate(orders, start=1)
            for arm_place, arm in enumerate(arms, start=1)
            for level_place, level in enumerate(block_levels, start=1)
        ]
    first_arms = orders[0][0]
    return [
        Slot(arm, block, level, arm_place, level_place)
        for arm_place, arm in enumerate(first_arms, start=1)
        for block, (_, block_levels) in enumerate(orders, start=1)
        for level_place, level in enumerate(block_levels, start=1)
    ]
