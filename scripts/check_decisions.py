"""How often the question's decisions are wrong, and what they cost: whole experiments with
known effects, simulated request by request and pushed through the code the page and the
worker use (inference.speedup_cells, then question.question_decisions, which replays the
looks of experiments/measurement/stats/sequential.py).

A simulated experiment has a baseline, an A/A replicate (no effect by construction) and
speculative arms, at several concurrency levels, in randomised blocks
(experiments/measurement/planning/schedule.py): per block each arm runs on a freshly started server,
which runs every level. Each run sends the same prompts; per request

    decode time = (output tokens - 1) × the prompt's per-token cost × the level's cost
                  × server start × run × host(t) × burst × arm effect × request noise
    TTFT        = the prompt's prefill × the level's cost × server start × run × host(t)
                  × burst × request noise

and TPOT, E2E and the run's throughputs all come from those requests (the run lasts
Σ E2E / concurrency). A gain g divides the arm's per-token decode time by 1 + g: the TPOT
speedup is 1 + g, E2E and throughput gain through their decode part only. Every arm fails
a request with the same probability. The server-start factor is common to a block's
levels (a shared server), the baseline's runs are common to every arm's ratio; so the
cells are correlated as on a real host. Disturbances: see DISTURBANCES.

The sequential design looks after each block (question_decisions with the runs so far,
final=False) until no candidate cell is open or the maximum is reached, then decides with
final=True; a block after the first look runs the baseline, the replicate and the arms
with an open cell only. Experiments are drawn with every arm in every block, and the
sequential design drops the runs of arms that had stopped (the host's timeline stays
that of the full schedule).

"Boundaries" runs the same experiments through Pocock's boundary and spending boundaries of
the power family (sequential.look_levels) to choose between them.

    .venv/bin/python scripts/check_decisions.py [--quick] [--experiments N] [--seed S] [--only TABLE]

About 10 minutes at the default size on one core, 2 with --quick.
"""

import argparse
import contextlib
import functools
import math
import os
import statistics
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.measurement.planning.schedule import schedule
from experiments.measurement.stats import inference, intervals, question, sequential, verdicts

BASELINE, REPLICATE = 0, 1
PROMPTS = 40
METRIC = "server_tpot"  # the model's default primary metric
MARGIN = 0.02
START_MINUTES = 1.0  # device-minutes of one server start (model load and warm-up)
FAILURE_RATE = 0.003
# Spreads (lognormal sd) that give a block log-ratio spread σ of about 5.5 % on TPOT.
START_SD, RUN_SD, REQUEST_SD, TTFT_SD = 0.03, 0.024, 0.05, 0.10

DEFAULT_MAX_BLOCKS = 10  # the form's defaults (Experiment.repetitions, worthwhile_gain)
DEFAULT_WORTHWHILE = 0.07
FIXED_MAX = 16  # the longest fixed design tried for "equal power"

DISTURBANCES = {
    "normal": "lognormal server starts",
    "heavy starts": "server starts t with 3 df on the log scale, same sd",
    "skewed starts": "server starts' log a standardised lognormal(0, 1), same sd",
    "step": "the host 15 % slower from a random run of blocks 1-6 on",
    "bursts": "a run in 10 slowed by 5-30 % (noisy neighbour)",
    "drift": "the host a random walk, 0.5 % per run",
}


@dataclass(frozen=True)
class Shape:
    name: str
    candidates: int
    levels: tuple[int, ...]

    @property
    def arms(self) -> int:
        return 2 + self.candidates

    @property
    def candidate_arms(self) -> list[int]:
        return list(range(2, self.arms))


DEMO = Shape("demo (A/A + 2 arms × 2 levels)", 2, (1, 4))
LARGE = Shape("4 arms × 4 levels", 4, (1, 2, 4, 8))


# ---------------------------------------------------------------- the simulator


@dataclass
class Experiment:
    """Every arm's runs in every block, and what each run cost in device-minutes."""

    runs: dict[int, list[inference.RunData]]  # block -> runs
    minutes: dict[tuple[int, int], float]  # (block, arm) -> start + runs
    blocks: int


def _log_starts(rng: np.random.Generator, disturbance: str, size: tuple[int, ...]) -> np.ndarray:
    if disturbance == "heavy starts":
        return START_SD * rng.standard_t(3, size) / math.sqrt(3)
    if disturbance == "skewed starts":
        s = 1.0
        mean, sd = math.exp(s * s / 2), math.sqrt((math.exp(s * s) - 1) * math.exp(s * s))
        return START_SD * (rng.lognormal(0.0, s, size) - mean) / sd
    return rng.normal(0.0, START_SD, size)


def _log_host(rng: np.random.Generator, disturbance: str, position: np.ndarray, per_block: int) -> np.ndarray:
    """The host's log slowdown at each run's position in the execution order."""
    if disturbance == "step":
        at = rng.integers(0, 6 * per_block)
        return np.where(position >= at, math.log(1.15), 0.0)
    if disturbance == "drift":
        walk = np.cumsum(rng.normal(0.0, 0.005, position.max() + 1))
        return walk[position]
    return np.zeros(position.shape)


def _positions(rng: np.random.Generator, shape: Shape, blocks: int) -> np.ndarray:
    """(block, arm, level) -> the run's place in the worker's execution order."""
    position = np.zeros((blocks, shape.arms, len(shape.levels)), int)
    level_index = {level: i for i, level in enumerate(shape.levels)}
    slots = schedule(n_arms=shape.arms, levels=list(shape.levels), blocks=blocks, seed=int(rng.integers(1 << 31)))
    for place, slot in enumerate(slots):
        position[slot.block - 1, slot.arm_index, level_index[slot.level]] = place
    return position


def _run_data(arm: int, level: int, block: int, tokens: np.ndarray, decode: np.ndarray, ttft: np.ndarray,
              ok: np.ndarray) -> tuple[inference.RunData, float]:  # fmt: skip
    """One run's RunData from its requests, and its duration in minutes."""
    e2e = ttft + decode
    duration_s = float(e2e.sum()) / level / 1000
    prompts = np.flatnonzero(ok).tolist()
    tpot = dict(zip(prompts, (decode[ok] / (tokens[ok] - 1)).tolist(), strict=True))
    done = int(ok.sum())
    options: dict = {
        "latencies": {
            "server_tpot": tpot,
            "tpot": tpot,
            "e2e": dict(zip(prompts, e2e[ok].tolist(), strict=True)),
            "ttft": dict(zip(prompts, ttft[ok].tolist(), strict=True)),
        },
        "throughputs": {
            "output_throughput": float(tokens[ok].sum()) / duration_s,
            "request_throughput": done / duration_s,
        },
        "failed": len(ok) - done,
        "output_tokens": {p: int(tokens[p]) for p in prompts},
        "requests": len(ok),
    }
    return inference.RunData(arm=arm, level=level, block=block, **options), duration_s / 60


def simulate_experiment(
    rng: np.random.Generator, shape: Shape, *, gain: float, blocks: int, disturbance: str = "normal",
    gains: Sequence[float] | None = None, level_gains: Sequence[Sequence[float]] | None = None,
) -> Experiment:  # fmt: skip
    """One experiment with every arm in every block; the candidates gain `gain` (or `gains`, one per
    candidate, or `level_gains`, one per candidate and level: a speedup that depends on concurrency)."""
    forget()
    arms, levels = shape.arms, np.array(shape.levels, float)
    size = (blocks, arms, len(levels))
    tokens = np.clip(np.round(rng.lognormal(math.log(96), 0.7, PROMPTS)), 2, 512)
    per_token = 20.0 * rng.lognormal(0.0, 0.25, PROMPTS)
    prefill = 40.0 + 0.3 * rng.lognormal(math.log(300), 0.6, PROMPTS)
    position = _positions(rng, shape, blocks)
    log_run = _log_starts(rng, disturbance, size[:2])[:, :, None] + rng.normal(0.0, RUN_SD, size)
    log_run = log_run + _log_host(rng, disturbance, position, arms * len(levels))
    if disturbance == "bursts":
        log_run = log_run + np.where(rng.random(size) < 0.1, np.log1p(rng.uniform(0.05, 0.30, size)), 0.0)
    effect = np.zeros((arms, len(levels)))
    if level_gains is not None:
        effect[2:] = -np.log1p(np.asarray(level_gains, float))
    else:
        per_arm = np.asarray(gains if gains is not None else [gain] * shape.candidates, float)
        effect[2:] = -np.log1p(per_arm)[:, None]
    factor = np.exp(log_run)[..., None]
    decode_cost = (tokens - 1) * per_token * (1 + 0.15 * np.log2(levels))[None, None, :, None]
    decode = decode_cost * factor * np.exp(effect)[None, :, :, None]
    decode = decode * rng.lognormal(0.0, REQUEST_SD, (*size, PROMPTS))
    ttft = prefill * (1 + 0.3 * np.log2(levels))[None, None, :, None] * factor
    ttft = ttft * rng.lognormal(0.0, TTFT_SD, (*size, PROMPTS))
    ok = rng.random((*size, PROMPTS)) >= FAILURE_RATE
    runs: dict[int, list[inference.RunData]] = {}
    minutes: dict[tuple[int, int], float] = {}
    for b in range(blocks):
        runs[b + 1] = []
        for a in range(arms):
            minutes[(b + 1, a)] = START_MINUTES
            for i, level in enumerate(shape.levels):
                run, run_minutes = _run_data(a, level, b + 1, tokens, decode[b, a, i], ttft[b, a, i], ok[b, a, i])
                runs[b + 1].append(run)
                minutes[(b + 1, a)] += run_minutes
    return Experiment(runs, minutes, blocks)


# ---------------------------------------------------------------- speed


@contextlib.contextmanager
def patched(module: object, name: str, value: object) -> Iterator[None]:
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

    def __init__(self, original: Callable) -> None:
        self.original, self.values = original, {}  # type: ignore[var-annotated]

    def __call__(self, metric: str, base: inference.RunData, arm: inference.RunData, **kwargs: bool) -> tuple:
        key = (metric, id(base), id(arm), tuple(kwargs.items()))
        if key not in self.values:
            self.values[key] = (base, arm, self.original(metric, base, arm, **kwargs))
        return self.values[key][2]


_caches: list[Callable[[], None]] = []


@contextlib.contextmanager
def memoised() -> Iterator[None]:
    """Keep the results of pure functions the looks call again and again with the same
    arguments (each look replays every earlier one and recomputes every block's ratio); the
    decisions are the same (tests/measurement/test_decisions_simulation.py checks it).
    Without it a 4 × 4 experiment takes a second or more."""
    original_look, pairs = sequential._look, _RunPairCache(inference._block_ratio)
    look = functools.cache(lambda items, blocks: original_look(dict(items), blocks))

    def cached_look(ratios: dict, blocks: int) -> object:
        return look(tuple(sorted(item for item in ratios.items() if item[0] <= blocks)), blocks)

    interval = functools.cache(lambda ratios, confidence: intervals.block_interval(ratios, confidence=confidence))
    replacements = [
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


def _tuple_interval(interval: Callable, ratios: Sequence[float], *, confidence: float = intervals.CONFIDENCE) -> object:
    return interval(tuple(ratios), confidence)


# ---------------------------------------------------------------- through the page's code


def decisions(
    runs: list[inference.RunData], shape: Shape, design: sequential.Design, *, final: bool, metric: str = METRIC
) -> question.QuestionDecisions:
    """What the page and the worker decide on these runs."""
    cells = inference.speedup_cells(
        runs, baseline=BASELINE, arms=[REPLICATE, *shape.candidate_arms], levels=list(shape.levels),
        margin=design.margin, metrics=(metric,),
    )  # fmt: skip
    asked = question.Question(metric, shape.levels, design)
    return question.question_decisions(
        runs, cells, baseline=BASELINE, candidates=shape.candidate_arms, replicate=REPLICATE, question=asked,
        final=final,
    )  # fmt: skip


@dataclass(frozen=True)
class Result:
    decided: question.QuestionDecisions
    blocks: int
    minutes: float


def run_sequential(experiment: Experiment, shape: Shape, design: sequential.Design, metric: str = METRIC) -> Result:
    """The experiment as the worker runs it: a look after each block, the stopped arms left out."""
    running = set(range(shape.arms))
    runs: list[inference.RunData] = []
    minutes = 0.0
    for block in range(1, design.max_blocks + 1):
        runs += [run for run in experiment.runs[block] if run.arm in running]
        minutes += sum(experiment.minutes[(block, arm)] for arm in running)
        decided = decisions(runs, shape, design, final=False, metric=metric)
        if not decided.unsettled:
            break
        running = {BASELINE, REPLICATE, *decided.open_arms()}
    return Result(decisions(runs, shape, design, final=True, metric=metric), block, minutes)


def run_fixed(experiment: Experiment, shape: Shape, blocks: int, *, worthwhile: float, metric: str = METRIC) -> Result:
    """The fixed design of `blocks` blocks: every arm in every block, one look at the end."""
    design = sequential.Design(blocks, sequential=False, margin=MARGIN, worthwhile_gain=worthwhile)
    runs = [run for block in range(1, blocks + 1) for run in experiment.runs[block]]
    minutes = sum(m for (block, _), m in experiment.minutes.items() if block <= blocks)
    return Result(decisions(runs, shape, design, final=True, metric=metric), blocks, minutes)


# ---------------------------------------------------------------- rules to compare with


def naive_level(alpha: float, looks: tuple[int, ...], *args: object) -> float:
    """The negative control: every look at the unadjusted 5 % (no boundary, no Holm);
    the equivalence interval unadjusted for the looks too."""
    return max(alpha, sequential.ALPHA)


def _null_covariance(keys: Sequence[tuple[int, int]]) -> np.ndarray:
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
def _max_t_level(keys: tuple[tuple[int, int], ...], alpha: float, looks: tuple[int, ...]) -> float:
    """The p-level every cell of `keys` uses at every look so that the chance of any call over
    cells and looks is alpha under no effect, with the cells' true correlation (an oracle
    max-t: the best a Dunnett-style value could do)."""
    rng = np.random.default_rng(7)
    paths = 40_000
    chol = np.linalg.cholesky(_null_covariance(keys))
    draws = rng.standard_normal((paths, max(looks), len(keys))) @ chol.T
    smallest = np.ones(paths)
    from scipy import stats as scipy_stats

    for n in looks:
        sample = draws[:, :n, :]
        t = sample.mean(axis=1) / (sample.std(axis=1, ddof=1) / math.sqrt(n))
        smallest = np.minimum(smallest, (2 * scipy_stats.t.sf(np.abs(t), n - 1)).min(axis=1))
    return float(np.quantile(smallest, alpha))


@dataclass
class _MaxT:
    """sequential._holm_calls replaced by a step-down max-t over the cells not yet called."""

    family: list = field(default_factory=list)
    called: set = field(default_factory=set)

    def decide(self, original: Callable) -> Callable:
        def wrapped(cells: Sequence[sequential.PrimaryCell], design: sequential.Design, **kwargs: object) -> list:
            self.family = [cell.key for cell in cells if cell.blocked is None]
            self.called = set()
            return original(cells, design, **kwargs)

        return wrapped

    def calls(self, looks: dict, family: int, design: sequential.Design) -> dict:
        result: dict = {}
        ranked = sorted((k for k in looks if looks[k].p_value is not None), key=lambda k: looks[k].p_value)
        for key in ranked:
            remaining = tuple(sorted(k for k in self.family if k not in self.called))
            level = _max_t_level(remaining, design.alpha, design.looks)
            if looks[key].p_value > level:
                break
            point = looks[key].estimate.point or 1.0
            result[key] = (sequential.FASTER if point > 1 else sequential.SLOWER, level)
            self.called.add(key)
        return result


@contextlib.contextmanager
def max_t() -> Iterator[None]:
    rule = _MaxT()
    with patched(sequential, "decide", rule.decide(sequential.decide)), patched(sequential, "_holm_calls", rule.calls):
        yield


# ---------------------------------------------------------------- counting


CALLED = (sequential.FASTER, sequential.SLOWER)
SETTLED_NULL = (sequential.EQUIVALENT, sequential.NOT_WORTH_IT)


@dataclass
class Tally:
    """Counts over experiments of one row."""

    experiments: int = 0
    family_false: int = 0  # any candidate cell called faster or slower (at no effect)
    replicate_false: int = 0
    cells: int = 0
    cells_called: int = 0
    cells_faster: int = 0
    cells_settled_null: int = 0
    arms: int = 0
    arms_all_faster: int = 0
    arms_settled_null: int = 0
    blocked: int = 0  # cells with a no-call reason (failure rates differ)
    blocks: int = 0
    minutes: float = 0.0

    def add(self, result: Result, shape: Shape) -> None:
        candidates, replicate = result.decided.candidates, result.decided.replicate
        self.experiments += 1
        self.family_false += any(d.outcome in CALLED for d in candidates)
        self.replicate_false += any(d.outcome in CALLED for d in replicate)
        self.cells += len(candidates)
        self.cells_called += sum(d.outcome in CALLED for d in candidates)
        self.cells_faster += sum(d.outcome == sequential.FASTER for d in candidates)
        self.cells_settled_null += sum(d.outcome in SETTLED_NULL for d in candidates)
        self.blocked += sum(d.outcome not in (*sequential.SETTLED, sequential.INCONCLUSIVE) for d in candidates)
        for arm in shape.candidate_arms:
            mine = [d for d in candidates if d.key[0] == arm]
            self.arms += 1
            self.arms_all_faster += all(d.outcome == sequential.FASTER for d in mine)
            self.arms_settled_null += all(d.outcome in SETTLED_NULL for d in mine)
        self.blocks += result.blocks
        self.minutes += result.minutes

    def share(self, name: str, of: str = "experiments") -> float:
        return getattr(self, name) / max(1, getattr(self, of))

    @property
    def mean_blocks(self) -> float:
        return self.blocks / max(1, self.experiments)

    @property
    def mean_minutes(self) -> float:
        return self.minutes / max(1, self.experiments)


def design_of(
    max_blocks: int = DEFAULT_MAX_BLOCKS,
    worthwhile: float = DEFAULT_WORTHWHILE,
    spending: float | None = sequential.SPENDING,
) -> sequential.Design:
    return sequential.Design(max_blocks, sequential=True, margin=MARGIN, worthwhile_gain=worthwhile, spending=spending)


def block_spread(experiment: Experiment, shape: Shape, metric: str = METRIC) -> float:
    """The sd of the replicate's block log ratios on the metric, averaged over its levels."""
    runs = [run for block_runs in experiment.runs.values() for run in block_runs]
    spreads = []
    for level in shape.levels:
        ratios = inference.block_ratios(runs, metric, baseline=BASELINE, arm=REPLICATE, level=level)
        spreads.append(float(np.std(np.log(list(ratios.values())), ddof=1)))
    return float(np.mean(spreads))


# ---------------------------------------------------------------- tables


def _pct(value: float) -> str:
    return f"{value:>7.1%}"


def no_effect_table(rng: np.random.Generator, n: int, design: sequential.Design) -> dict[str, Tally]:
    print(f"\n## No effect: {n} experiments per row of the demo, {_size(n, LARGE)} of 4 × 4, {_design_text(design)}")
    print("family: any candidate primary cell called faster or slower; naive: a look after every block at 5 %,")
    print("no Holm; settled: equivalent or not worth it (cells; arms with every primary cell settled)")
    head = "shape", "disturbance", "σ", "family", "naive", "cell", "A/A fam.", "settled", "arms set.", "blocked"
    print(f"{head[0]:>30} {head[1]:>13} {head[2]:>6} " + " ".join(f"{h:>9}" for h in head[3:]) + " blocks  dev-min")
    tallies = {}
    for shape, disturbance in [(s, d) for s in (DEMO, LARGE) for d in DISTURBANCES]:
        tally, naive, spread = Tally(), Tally(), []
        for _ in range(_size(n, shape)):
            experiment = simulate_experiment(rng, shape, gain=0.0, blocks=design.max_blocks, disturbance=disturbance)
            spread.append(block_spread(experiment, shape))
            tally.add(run_sequential(experiment, shape, design), shape)
            with patched(sequential, "nominal_level", naive_level):
                naive.add(run_sequential(experiment, shape, design), shape)
        tallies[f"{shape.name}/{disturbance}"] = tally
        figures = (
            tally.share("family_false"), naive.share("family_false"), tally.share("cells_called", "cells"),
            tally.share("replicate_false"), tally.share("cells_settled_null", "cells"),
            tally.share("arms_settled_null", "arms"), tally.share("blocked", "cells"),
        )  # fmt: skip
        print(
            f"{shape.name:>30} {disturbance:>13} {np.mean(spread):>6.1%} " + " ".join(f"{f:>9.1%}" for f in figures)
            + f" {tally.mean_blocks:>6.2f} {tally.mean_minutes:>8.1f}"
        )  # fmt: skip
    return tallies


def _size(n: int, shape: Shape) -> int:
    """Experiments per row: half as many of the larger shape, which costs three times as much."""
    return n if shape is DEMO else max(50, n // 2)


def _design_text(design: sequential.Design) -> str:
    return (
        f"sequential, at most {design.max_blocks} blocks, margin {design.margin:.0%}, "
        f"worth it from {design.worthwhile_gain:.0%}, metric {METRIC}"
    )


def _power_row(rng: np.random.Generator, shape: Shape, gain: float, disturbance: str, n: int,
               design: sequential.Design) -> tuple[Tally, dict[int, Tally]]:  # fmt: skip
    sequential_tally, fixed = Tally(), {blocks: Tally() for blocks in range(3, FIXED_MAX + 1)}
    for _ in range(n):
        experiment = simulate_experiment(
            rng, shape, gain=gain, blocks=max(FIXED_MAX, design.max_blocks), disturbance=disturbance
        )
        sequential_tally.add(run_sequential(experiment, shape, design), shape)
        for blocks, tally in fixed.items():
            tally.add(run_fixed(experiment, shape, blocks, worthwhile=design.worthwhile_gain), shape)
    return sequential_tally, fixed


def power_table(
    rng: np.random.Generator, n: int, design: sequential.Design, rows: list[tuple[Shape, float, str]]
) -> None:
    print(f"\n## Gains: {n} experiments per row of the demo, {_size(n, LARGE)} of 4 × 4, every candidate arm gaining,")
    print(f"{_design_text(design)}; power: candidate cells called faster (and arms with every primary cell faster);")
    print("fixed: the fewest blocks of a fixed design (one look, Holm) with at least the same per-cell power on the")
    print(f"same experiments (at most {FIXED_MAX})")
    print(
        f"{'shape':>30} {'disturbance':>13} {'gain':>5} {'power':>7} {'arms':>7} {'blocks':>6} {'dev-min':>8}"
        f" {'fixed':>6} {'power':>7} {'dev-min':>8} {'A/A fam.':>8}"
    )
    for shape, gain, disturbance in rows:
        tally, fixed = _power_row(rng, shape, gain, disturbance, _size(n, shape), design)
        power = tally.share("cells_faster", "cells")
        equal = next((b for b, t in fixed.items() if t.share("cells_faster", "cells") >= power), None)
        fixed_text = (
            f"{equal:>6} {_pct(fixed[equal].share('cells_faster', 'cells'))} {fixed[equal].mean_minutes:>8.1f}"
            if equal is not None
            else f"{'>' + str(FIXED_MAX):>6} {_pct(fixed[FIXED_MAX].share('cells_faster', 'cells'))} {'':>8}"
        )
        print(
            f"{shape.name:>30} {disturbance:>13} {gain:>5.0%} {_pct(power)}"
            f" {_pct(tally.share('arms_all_faster', 'arms'))}"
            f" {tally.mean_blocks:>6.2f} {tally.mean_minutes:>8.1f} {fixed_text} {tally.share('replicate_false'):>8.1%}"
        )


def max_t_table(rng: np.random.Generator, n: int, design: sequential.Design) -> None:
    print(
        f"\n## Holm against an oracle max-t (the cells' true correlation), {n} experiments per row, same experiments,"
    )
    print("both on Pocock's boundary (the max-t level is simulated for it);")
    print("the first candidate arm gains, the others none; power: the gaining arm's cells called faster;")
    print("false: any no-effect candidate cell called faster or slower")
    print(f"{'shape':>30} {'gain':>5} {'Holm power':>10} {'max-t power':>11} {'Holm false':>10} {'max-t false':>11}")
    for shape, gain in [(DEMO, 0.0), (DEMO, 0.10), (LARGE, 0.0), (LARGE, 0.10)]:
        gains = [gain] + [0.0] * (shape.candidates - 1)
        faster, false = {"holm": 0, "max-t": 0}, {"holm": 0, "max-t": 0}
        for _ in range(n):
            experiment = simulate_experiment(rng, shape, gain=0.0, gains=gains, blocks=design.max_blocks)
            for name, context in (("holm", contextlib.nullcontext()), ("max-t", max_t())):
                with context:
                    result = run_sequential(experiment, shape, design)
                first = [d for d in result.decided.candidates if d.key[0] == 2]
                null = [d for d in result.decided.candidates if d.key[0] != 2 or not gain]
                faster[name] += sum(d.outcome == sequential.FASTER for d in first)
                false[name] += any(d.outcome in CALLED for d in null)
        cells = n * len(shape.levels)
        power = [f"{faster[name] / cells:.1%}" if gain else "–" for name in ("holm", "max-t")]
        print(
            f"{shape.name:>30} {gain:>5.0%} {power[0]:>10} {power[1]:>11}"
            f" {false['holm'] / n:>10.1%} {false['max-t'] / n:>11.1%}"
        )


def boundaries_table(rng: np.random.Generator, n: int) -> None:
    print(
        f"\n## Boundaries: {n} experiments per row, normal host, at most {DEFAULT_MAX_BLOCKS} blocks, same experiments"
    )
    print("Pocock: one level at every look; ρ: alpha spent as α (n / N)^ρ (ρ = 3 is close to O'Brien-Fleming),")
    print("the equivalence interval on the same boundary")
    print("no effect: family-wise false calls, arms settled, mean blocks;")
    print("10 % gain: power per cell, mean blocks, dev-min;")
    print("fixed: the fewest blocks of a fixed design with that power, its dev-min")
    boundaries: list[float | None] = [None, 1.0, 2.0, 3.0, 4.0]
    names = ["Pocock" if b is None else f"ρ = {b:g}" for b in boundaries]
    print(f"{'shape':>30} {'boundary':>9} {'family':>7} {'arms set.':>9} {'blocks':>6} {'power':>7} {'blocks':>6}"
          f" {'dev-min':>8} {'fixed':>6} {'dev-min':>8}")  # fmt: skip
    for shape in (DEMO, LARGE):
        nulls = [simulate_experiment(rng, shape, gain=0.0, blocks=DEFAULT_MAX_BLOCKS) for _ in range(n)]
        gains = [simulate_experiment(rng, shape, gain=0.1, blocks=FIXED_MAX) for _ in range(n)]
        fixed = {blocks: Tally() for blocks in range(3, FIXED_MAX + 1)}
        for experiment in gains:
            for blocks, tally in fixed.items():
                tally.add(run_fixed(experiment, shape, blocks, worthwhile=DEFAULT_WORTHWHILE), shape)
        for boundary, name in zip(boundaries, names, strict=True):
            design = design_of(spending=boundary)
            null, gain = Tally(), Tally()
            for experiment in nulls:
                null.add(run_sequential(experiment, shape, design), shape)
            for experiment in gains:
                gain.add(run_sequential(experiment, shape, design), shape)
            power = gain.share("cells_faster", "cells")
            equal = next((b for b, t in fixed.items() if t.share("cells_faster", "cells") >= power), None)
            fixed_text = f"{equal:>6} {fixed[equal].mean_minutes:>8.1f}" if equal else f"{'>' + str(FIXED_MAX):>6}"
            print(
                f"{shape.name:>30} {name:>9} {_pct(null.share('family_false'))}"
                f" {null.share('arms_settled_null', 'arms'):>9.1%} {null.mean_blocks:>6.2f}"
                f" {_pct(power)} {gain.mean_blocks:>6.2f} {gain.mean_minutes:>8.1f} {fixed_text}"
            )


def defaults_table(rng: np.random.Generator, n: int) -> None:
    print(f"\n## Defaults: demo shape, normal host, {n} experiments per cell of the table")
    print("no effect: family-wise false calls, arms settled, mean blocks; 10 % gain: power per cell, mean blocks")
    print(f"{'max':>4} {'worth':>6} {'family':>7} {'arms set.':>9} {'blocks':>6} {'power':>7} {'blocks':>6}")
    for max_blocks in (8, 10, 12, 16):
        for worthwhile in (0.05, 0.07, 0.10):
            design = design_of(max_blocks, worthwhile)
            null, gain = Tally(), Tally()
            for _ in range(n):
                null.add(
                    run_sequential(simulate_experiment(rng, DEMO, gain=0.0, blocks=max_blocks), DEMO, design), DEMO
                )
                gain.add(
                    run_sequential(simulate_experiment(rng, DEMO, gain=0.1, blocks=max_blocks), DEMO, design), DEMO
                )
            print(
                f"{max_blocks:>4} {worthwhile:>6.0%} {_pct(null.share('family_false'))}"
                f" {null.share('arms_settled_null', 'arms'):>9.1%} {null.mean_blocks:>6.2f}"
                f" {_pct(gain.share('cells_faster', 'cells'))} {gain.mean_blocks:>6.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer experiments per row (a rough look)")
    parser.add_argument("--experiments", type=int, help="experiments per row (default 400, 100 with --quick)")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--only", choices=("null", "power", "max-t", "defaults", "boundaries"), action="append")
    args = parser.parse_args()
    n = args.experiments or (100 if args.quick else 400)
    rng = np.random.default_rng(args.seed)
    design = design_of()
    began = time.monotonic()
    only = set(args.only or ("null", "power", "max-t", "defaults", "boundaries"))
    with memoised():
        _tables(rng, n, design, only)
    print(f"\n{time.monotonic() - began:.0f} s; seed {args.seed}")


def _tables(rng: np.random.Generator, n: int, design: sequential.Design, only: set[str]) -> None:
    if "null" in only:
        no_effect_table(rng, n, design)
    if "power" in only:
        rows = [(shape, gain, "normal") for shape in (DEMO, LARGE) for gain in (0.05, 0.10, 0.20)]
        rows += [(DEMO, 0.10, disturbance) for disturbance in DISTURBANCES if disturbance != "normal"]
        power_table(rng, max(50, n // 2), design, rows)
    if "max-t" in only:
        # The max-t level is Pocock's (_max_t_level): Holm is compared on the same boundary.
        max_t_table(rng, max(50, n // 4), design_of(spending=None))
    if "defaults" in only:
        defaults_table(rng, max(50, n // 4))
    if "boundaries" in only:
        boundaries_table(rng, max(50, n // 2))


if __name__ == "__main__":
    main()
