"""Simulated experiments decided fast: the results of pure functions that every look calls
again and again with the same arguments, kept for the experiment at hand. Each look replays
every earlier one and recomputes every block's ratio; without `memoised` a 4 × 4 experiment
takes a second or more. The decisions are the same (tests/simulation/test_decisions.py checks it).
"""

import contextlib
import functools
import math
import statistics
import types
from collections.abc import Callable, Iterator, Mapping, Sequence

from experiments.measurement.stats import inference, intervals, sequential, verdicts

BlockRatio = tuple[float | None, int]


@contextlib.contextmanager
def patched(module: object, name: str, value: object) -> Iterator[None]:
    """`module.name` replaced by `value` inside the block."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


class _RunPairCache:
    """inference._block_ratio kept per (metric, baseline run, arm run): each look recomputes
    the ratios of every block so far, which do not change. The runs are kept with their
    value, so a key's ids cannot be reused by other runs while it is stored."""

    def __init__(self, original: Callable[..., BlockRatio]) -> None:
        self.original = original
        self.values: dict[tuple[object, ...], tuple[inference.RunData, inference.RunData, BlockRatio]] = {}

    def __call__(self, metric: str, base: inference.RunData, arm: inference.RunData, **kwargs: bool) -> BlockRatio:
        key = (metric, id(base), id(arm), tuple(kwargs.items()))
        if key not in self.values:
            self.values[key] = (base, arm, self.original(metric, base, arm, **kwargs))
        return self.values[key][2]


_caches: list[Callable[[], None]] = []


@contextlib.contextmanager
def memoised() -> Iterator[None]:
    """Inside the block, the looks' pure functions keep their results until `forget`."""
    original_look, pairs = sequential._look, _RunPairCache(inference._block_ratio)
    look = functools.cache(lambda items, blocks: original_look(dict(items), blocks))

    def cached_look(ratios: Mapping[int, float], blocks: int) -> object:
        return look(tuple(sorted(item for item in ratios.items() if item[0] <= blocks)), blocks)

    interval = functools.cache(lambda ratios, confidence: intervals.block_interval(ratios, confidence=confidence))
    replacements: list[tuple[object, str, object]] = [
        (sequential, "nominal_level", functools.cache(sequential.nominal_level)),
        (sequential, "_look", cached_look),
        (sequential, "block_interval", functools.partial(_tuple_interval, interval)),
        (intervals, "statistics", _float_statistics()),
        (verdicts, "failure_rates_p", functools.cache(verdicts.failure_rates_p)),
        (inference, "_block_ratio", pairs),
    ]
    with contextlib.ExitStack() as stack:
        for module, name, value in replacements:
            stack.enter_context(patched(module, name, value))
        _caches[:] = [look.cache_clear, interval.cache_clear, pairs.values.clear]
        try:
            yield
        finally:
            _caches.clear()


def forget() -> None:
    """Drop what `memoised` kept of the last experiment."""
    for clear in _caches:
        clear()


def _float_statistics() -> types.SimpleNamespace:
    """The statistics module with a float standard deviation: statistics.stdev sums exact
    fractions (half a millisecond a call, half the time of a look); this one agrees with it
    to the last bits or so, which moves no decision (the test checks it)."""
    module = types.SimpleNamespace(**vars(statistics))

    def stdev(data: Sequence[float]) -> float:
        values = list(data)
        mean = math.fsum(values) / len(values)
        return math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (len(values) - 1))

    module.stdev = stdev
    return module


def _tuple_interval(
    interval: Callable[[tuple[float, ...], float], intervals.RatioEstimate], ratios: Sequence[float], *,
    confidence: float = intervals.CONFIDENCE,
) -> intervals.RatioEstimate:  # fmt: skip
    return interval(tuple(ratios), confidence)
