"""A rule to compare Holm's with: an oracle step-down max-t that knows the simulator's true
correlation between the cells (the best a Dunnett-style critical value could do), on
Pocock's boundary (the max-t level is simulated for it)."""

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as scipy_stats

from experiments.measurement.stats import sequential
from experiments.simulation.simulator import PROMPTS, REQUEST_SD, RUN_SD, START_SD
from experiments.simulation.speed import patched

CellKey = tuple[int, int]
Decide = Callable[..., list[sequential.Decision[CellKey]]]


def _null_covariance(keys: Sequence[CellKey]) -> np.ndarray:
    """The simulator's covariance of the cells' block log ratios: the baseline's start and run
    are shared by every arm at a level, an arm's start by its levels."""
    request = 2 * REQUEST_SD**2 / PROMPTS
    cov = np.empty((len(keys), len(keys)))
    for i, (arm, level) in enumerate(keys):
        for j, (other, other_level) in enumerate(keys):
            same_arm, same_level = arm == other, level == other_level
            start = START_SD**2 * (1 + same_arm)
            run = RUN_SD**2 * same_level * (1 + same_arm) + request * (same_arm and same_level)
            cov[i, j] = start + run
    return cov


@functools.cache
def _max_t_level(keys: tuple[CellKey, ...], alpha: float, looks: tuple[int, ...]) -> float:
    """The p-level every cell of `keys` uses at every look so that the chance of any call over
    cells and looks is alpha under no effect, with the cells' true correlation."""
    rng = np.random.default_rng(7)
    paths = 40_000
    chol = np.linalg.cholesky(_null_covariance(keys))
    draws = rng.standard_normal((paths, max(looks), len(keys))) @ chol.T
    smallest = np.ones(paths)
    for n in looks:
        sample = draws[:, :n, :]
        t = sample.mean(axis=1) / (sample.std(axis=1, ddof=1) / math.sqrt(n))
        smallest = np.minimum(smallest, (2 * scipy_stats.t.sf(np.abs(t), n - 1)).min(axis=1))
    return float(np.quantile(smallest, alpha))


@dataclass
class _MaxT:
    """sequential._holm_calls replaced by a step-down max-t over the cells not yet called."""

    family: list[CellKey] = field(default_factory=list)
    called: set[CellKey] = field(default_factory=set)

    def decide(self, original: Decide) -> Decide:
        def wrapped(
            cells: Sequence[sequential.PrimaryCell[CellKey]], design: sequential.Design, **kwargs: object
        ) -> list[sequential.Decision[CellKey]]:
            self.family = [cell.key for cell in cells if cell.blocked is None]
            self.called = set()
            return original(cells, design, **kwargs)

        return wrapped

    def calls(
        self, looks: dict[CellKey, "sequential._Look"], family: int, design: sequential.Design
    ) -> dict[CellKey, tuple[str, float]]:
        result: dict[CellKey, tuple[str, float]] = {}
        tested = {key: look.p_value for key, look in looks.items() if look.p_value is not None}
        for key in sorted(tested, key=lambda k: tested[k]):
            remaining = tuple(sorted(k for k in self.family if k not in self.called))
            level = _max_t_level(remaining, design.alpha, design.looks)
            if tested[key] > level:
                break
            point = looks[key].estimate.point or 1.0
            result[key] = (sequential.FASTER if point > 1 else sequential.SLOWER, level)
            self.called.add(key)
        return result


@contextlib.contextmanager
def max_t() -> Iterator[None]:
    """Inside the block, the decisions call cells with the oracle max-t instead of Holm."""
    rule = _MaxT()
    with patched(sequential, "decide", rule.decide(sequential.decide)), patched(sequential, "_holm_calls", rule.calls):
        yield
