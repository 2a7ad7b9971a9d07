"""Acceptance arithmetic: vLLM's acceptance rate and length, acceptance by draft position
(unconditional, conditional, and conditional on what was drafted), and the engine steps and
tokens per step of a request's decode.

Plain Python on lists (no Django), so every function can be checked against a hand-computed
case; numpy the loops over every step of an experiment's requests (millions at scale), which
count exactly what the plain loops counted (tests/measurement/stats/test_acceptance_vectorised.py).
Metric definitions: docs/metrics.md.
"""

from collections.abc import Iterable, Sequence
from itertools import chain, pairwise

import numpy as np


def acceptance_rate(accepted: int | None, draft_tokens: int | None) -> float | None:
    """vLLM's draft acceptance rate: accepted draft tokens / proposed draft tokens."""
    if not draft_tokens or accepted is None:
        return None
    return accepted / draft_tokens


def acceptance_length(accepted: int | None, drafts: int | None) -> float | None:
    """Mean acceptance length tau = 1 + accepted / drafts (the 1 is the bonus token)."""
    if not drafts or accepted is None:
        return None
    return 1 + accepted / drafts


def decode_steps(output_tokens: int, accepted_per_step: Sequence[int] | None) -> int:
    """The engine steps that produced a request's output after its first token.

    Without speculation every decode step emits one token: output tokens - 1 steps. With
    it, vLLM's per-request `per_step_accepted` lists the steps that drafted something,
    each emitting accepted + 1 tokens; steps that drafted nothing (an n-gram or suffix
    lookup without a match) are not listed and emit one token each, so they are the
    tokens left over. The list can end with a step whose tokens were cut off at
    max_tokens (vLLM counts its acceptances anyway): steps after the output was complete
    are not counted.
    """
    emitted = max(0, output_tokens - 1)
    produced = steps = 0
    for accepted in accepted_per_step or ():
        if produced >= emitted:
            break
        produced += accepted + 1
        steps += 1
    return steps + max(0, emitted - produced)


def tokens_per_decode_step(tokens_after_first: int, steps: int) -> float | None:
    """Output tokens after each request's first (which prefill produces) per decode step,
    summed over requests; None without steps.

    Unlike tau, the steps on which the proposer drafted nothing count: this is what the
    decoding speed depends on. 1 for plain decoding.
    """
    if steps <= 0:
        return None
    return tokens_after_first / steps


def per_position_unconditional(accepted_per_pos: Sequence[int], drafts: int | None) -> list[float | None]:
    """accepted_at_pos[i] / drafts: the share of drafts accepted at least up to position i (vLLM's figure)."""
    if not drafts:
        return [None] * len(accepted_per_pos)
    return [count / drafts for count in accepted_per_pos]


def per_position_conditional(accepted_per_pos: Sequence[int], drafts: int) -> list[float | None]:
    """P(accept position i | accepted position i - 1): pos[0] / drafts, then pos[i] / pos[i - 1].

    From vLLM's counters, which assume every draft has the full length. None where the
    previous position was never accepted.
    """
    return [count / prev if prev else None for prev, count in pairwise([drafts, *accepted_per_pos])]


def per_position_conditional_from_steps(
    steps: Iterable[tuple[Sequence[int], Sequence[int]]],
) -> list[tuple[int, int]]:
    """Conditional acceptance from what was actually drafted at each position.

    `steps` yields one request's (accepted_per_step, drafted_per_step) arrays. Position i
    of a step was *at stake* when the step drafted more than i tokens and accepted the
    first i; it was *accepted* when the step accepted more than i. Returns
    [(accepted, at_stake)] per position: their ratio is P(accept i | i drafted and every
    earlier position accepted). Methods with a variable draft length (n-gram lookup, which
    may propose fewer than k tokens) are read correctly, unlike from the counters.
    """
    accepted_lists, drafted_lists = [], []
    for accepted_per_step, drafted_per_step in steps:
        if len(accepted_per_step) != len(drafted_per_step):
            raise ValueError("accepted_per_step and drafted_per_step differ in length")
        accepted_lists.append(accepted_per_step)
        drafted_lists.append(drafted_per_step)
    accepted, drafted = _flat(accepted_lists), _flat(drafted_lists)
    # A step puts positions 0 to min(accepted + 1, drafted) - 1 at stake, and of those it
    # accepts the ones below min(accepted, drafted).
    at_stake = np.maximum(np.minimum(accepted + 1, drafted), 0)
    accepted_up_to = np.maximum(np.minimum(accepted, drafted), 0)
    # The positions at stake in a step are 0 to some m - 1, so those of all steps are 0 to the largest.
    positions = int(at_stake.max()) if len(at_stake) else 0
    return list(zip(_steps_beyond(accepted_up_to, positions), _steps_beyond(at_stake, positions), strict=True))


def _flat(lists: Sequence[Sequence[int]]) -> np.ndarray:
    """The integers of all the lists, one after the other."""
    return np.fromiter(chain.from_iterable(lists), np.int64, sum(map(len, lists)))


def _steps_beyond(reach: np.ndarray, positions: int) -> list[int]:
    """For each position p below `positions`, how many of the values in `reach` exceed p."""
    at_least = np.bincount(reach, minlength=positions + 1)[::-1].cumsum()[::-1]
    counts: list[int] = at_least[1 : positions + 1].tolist()
    return counts


def decode_step_tokens(
    output_tokens: int,
    accepted_per_step: Sequence[int] | None,
    chunk_tokens: Sequence[int],
    *,
    speculative: bool,
) -> Sequence[int] | None:
    """The output tokens of each of a request's decode steps, in order, or None when its
    record cannot tell them apart.

    Plain decoding (`speculative` False) emits one token a step. A speculative arm's steps
    come from vLLM's per-request `per_step_accepted` when it accounts for every step, as it
    does for methods that draft at every step (a draft model, EAGLE, MTP): step i emits
    accepted_i + 1 tokens, the last one cut where the output ended (see decode_steps).
    Otherwise (a lookup method that skipped drafting on some steps, which the list leaves
    out, or a record without the list) from the streamed chunks after the first, which vLLM
    sends one per engine step unless the client falls behind and it merges several: they
    are used only when they number exactly the decode steps. None when they do not.
    """
    emitted = max(0, output_tokens - 1)
    if not speculative:
        return [1] * emitted
    if accepted_per_step:
        steps, produced = [], 0
        for accepted in accepted_per_step:
            if produced >= emitted:
                break
            steps.append(min(accepted + 1, emitted - produced))
            produced += steps[-1]
        if produced == emitted:
            return steps
    if len(chunk_tokens) - 1 == decode_steps(output_tokens, accepted_per_step):
        return chunk_tokens[1:]
    return None


def tokens_per_step_along_output(
    requests: Iterable[Sequence[int] | None], bucket_tokens: int
) -> tuple[list[tuple[int, float, int]], int]:
    """Tokens per decode step against the position in the output.

    `requests` yields each request's tokens per decode step in order (decode_step_tokens),
    or None for a request whose steps cannot be told apart, which is left out and counted.
    The first token comes from prefill, so the first decode step starts at output index 1;
    a step is put in the bucket of the output index where it starts.

    Returns ([(bucket_start, mean tokens per step, steps)] sorted by bucket_start, the
    number of requests left out).
    """
    if bucket_tokens < 1:
        raise ValueError("bucket_tokens must be at least 1")
    used, left_out = [], 0
    for steps in requests:
        if steps is None:
            left_out += 1
        elif len(steps):  # a one-token output has no decode step
            used.append(steps)
    tokens = _flat(used)
    lengths = np.fromiter(map(len, used), np.int64, len(used))
    first = np.cumsum(lengths) - lengths
    # Where each step starts in its request's output: 1 plus the tokens of the steps before it.
    before = np.cumsum(tokens) - tokens
    starts = 1 + before - np.repeat(before[first], lengths)
    buckets, where = np.unique(starts // bucket_tokens * bucket_tokens, return_inverse=True)
    totals = np.zeros(len(buckets), np.int64)
    np.add.at(totals, where, tokens)
    counts = np.bincount(where, minlength=len(buckets))
    rows = zip(buckets.tolist(), totals.tolist(), counts.tolist(), strict=True)
    return [(start, total / n, n) for start, total, n in rows], left_out
