"""The numpy counts in experiments/measurement/stats/acceptance.py give exactly the numbers of the plain loops they
replaced (kept here as the reference), on random requests and on the edge cases."""

import random
from collections import defaultdict

import pytest

from experiments.measurement.stats import acceptance


def _conditional_from_steps_loop(steps):
    accepted_at, at_stake = defaultdict(int), defaultdict(int)
    for accepted_per_step, drafted_per_step in steps:
        if len(accepted_per_step) != len(drafted_per_step):
            raise ValueError("accepted_per_step and drafted_per_step differ in length")
        for accepted, drafted in zip(accepted_per_step, drafted_per_step, strict=True):
            for position in range(min(accepted + 1, drafted)):
                at_stake[position] += 1
                accepted_at[position] += position < accepted
    return [(accepted_at[i], at_stake[i]) for i in range(len(at_stake))]


def _along_output_loop(requests, bucket_tokens):
    totals, left_out = defaultdict(lambda: [0, 0]), 0
    for steps in requests:
        if steps is None:
            left_out += 1
            continue
        index = 1
        for tokens in steps:
            bucket = totals[index // bucket_tokens * bucket_tokens]
            bucket[0] += tokens
            bucket[1] += 1
            index += tokens
    return [(start, total / n, n) for start, (total, n) in sorted(totals.items())], left_out


def _random_steps(rng):
    k = rng.randint(1, 6)
    requests = []
    for _ in range(rng.randint(0, 30)):
        drafted = [rng.randint(0, k) for _ in range(rng.randint(0, 40))]
        requests.append(([rng.randint(0, d) for d in drafted], drafted))
    return requests


def _random_step_tokens(rng):
    """Requests' tokens per decode step, some of them None (left out), some empty."""
    return [
        None if rng.random() < 0.2 else [rng.randint(1, 5) for _ in range(rng.randint(0, 60))]
        for _ in range(rng.randint(0, 30))
    ]


@pytest.mark.parametrize("seed", range(200))
def test_conditional_from_steps_counts_as_the_loop_did(seed):
    steps = _random_steps(random.Random(seed))
    assert acceptance.per_position_conditional_from_steps(iter(steps)) == _conditional_from_steps_loop(steps)


@pytest.mark.parametrize("seed", range(200))
def test_tokens_along_output_as_the_loop_did(seed):
    rng = random.Random(seed)
    requests, bucket = _random_step_tokens(rng), rng.choice([1, 3, 8, 16])
    assert acceptance.tokens_per_step_along_output(iter(requests), bucket) == _along_output_loop(requests, bucket)


@pytest.mark.parametrize(
    "steps",
    [[], [([], [])], [([0], [0])], [([2], [1])], [([3, 0], [3, 4])], [([5], [2]), ([0, 0], [0, 7])]],
)
def test_conditional_from_steps_edge_cases(steps):
    assert acceptance.per_position_conditional_from_steps(steps) == _conditional_from_steps_loop(steps)


@pytest.mark.parametrize("requests", [[], [None], [[]], [[2]], [None, [4, 4]], [[4, 4], [], [1]]])
def test_tokens_along_output_edge_cases(requests):
    assert acceptance.tokens_per_step_along_output(requests, 8) == _along_output_loop(requests, 8)


def test_the_results_are_plain_python_numbers():
    conditional = acceptance.per_position_conditional_from_steps([([1, 2], [2, 2])])
    along, left_out = acceptance.tokens_per_step_along_output([[2, 3]], 2)
    values = [v for pair in conditional for v in pair] + [v for row in along for v in row] + [left_out]
    assert {type(v) for v in values} <= {int, float}
