"""Whole experiments with known effects, simulated request by request.

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
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from experiments.measurement.planning.schedule import schedule
from experiments.measurement.stats import inference
from experiments.simulation.speed import forget

BASELINE, REPLICATE = 0, 1
PROMPTS = 40
METRIC = "server_tpot"  # the model's default primary metric
MARGIN = 0.02
START_MINUTES = 1.0  # device-minutes of one server start (model load and warm-up)
FAILURE_RATE = 0.003
# Spreads (lognormal sd) that give a block log-ratio spread σ of about 5.5 % on TPOT.
START_SD, RUN_SD, REQUEST_SD, TTFT_SD = 0.03, 0.024, 0.05, 0.10

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


@dataclass(frozen=True)
class Noise:
    """Spreads and events beyond a disturbance (the scenarios of experiments/simulation/verdict_audit.py):
    `scale` multiplies every server start's and run's spread (a noisy host); `arm_scale` gives each
    arm, by index, a further factor on its own starts and runs (arms with different spreads: an
    n-gram proposer on the host's cores); in a share `baseline_outliers` of blocks the baseline's
    server runs 30–60 % slower at every level (an outlier every ratio of the block shares); in a
    share `shocks` of blocks a stretch of consecutive runs is slowed 10–40 % (a shock to the host)."""

    scale: float = 1.0
    arm_scale: tuple[float, ...] = ()
    baseline_outliers: float = 0.0
    shocks: float = 0.0


def _noisy(rng: np.random.Generator, log_run: np.ndarray, position: np.ndarray, noise: Noise) -> np.ndarray:
    """The log slowdowns of every run with `noise` laid on."""
    blocks, arms, levels = log_run.shape
    log_run = log_run * noise.scale
    if noise.arm_scale:
        log_run = log_run * np.asarray(noise.arm_scale, float)[None, :arms, None]
    outliers = np.asarray(rng.random(blocks) < noise.baseline_outliers, dtype=bool)
    log_run[outliers, BASELINE, :] += np.log1p(rng.uniform(0.3, 0.6, int(outliers.sum())))[:, None]
    per_block = arms * levels
    for b in np.flatnonzero(rng.random(blocks) < noise.shocks):
        start = b * per_block + int(rng.integers(0, per_block))
        stretch = (position >= start) & (position < start + int(rng.integers(1, per_block + 1)))
        log_run = log_run + np.where(stretch, math.log1p(rng.uniform(0.1, 0.4)), 0.0)
    return log_run


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
        return np.asarray(walk[position])
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
    prompts: list[int] = np.flatnonzero(ok).tolist()
    tpot = dict(zip(prompts, (decode[ok] / (tokens[ok] - 1)).tolist(), strict=True))
    done = int(ok.sum())
    run = inference.RunData(
        arm=arm, level=level, block=block,
        latencies={
            "server_tpot": tpot, "tpot": tpot,
            "e2e": dict(zip(prompts, e2e[ok].tolist(), strict=True)),
            "ttft": dict(zip(prompts, ttft[ok].tolist(), strict=True)),
        },
        throughputs={
            "output_throughput": float(tokens[ok].sum()) / duration_s, "request_throughput": done / duration_s,
        },
        failed=len(ok) - done, output_tokens={p: int(tokens[p]) for p in prompts}, requests=len(ok),
    )  # fmt: skip
    return run, duration_s / 60


def _effects(shape: Shape, gain: float, gains: Sequence[float] | None,
             level_gains: Sequence[Sequence[float]] | None) -> np.ndarray:  # fmt: skip
    """(arm, level) -> the log factor on the arm's per-token decode time."""
    effect = np.zeros((shape.arms, len(shape.levels)))
    if level_gains is not None:
        effect[2:] = -np.log1p(np.asarray(level_gains, float))
    else:
        per_arm = np.asarray(gains if gains is not None else [gain] * shape.candidates, float)
        effect[2:] = -np.log1p(per_arm)[:, None]
    return effect


def _queue_factor(prefill: np.ndarray, decode_cost: np.ndarray, gain: float, loss: float) -> float:
    """The factor on an arm's time to first token (its requests wait in a queue) that makes its
    throughput `loss` below the baseline's while its decode is 1 + gain faster: the expected
    E2E over the prompts rises to the baseline's / (1 − loss)."""
    base = float(prefill.sum() + decode_cost.sum())
    return (base / (1 - loss) - float(decode_cost.sum()) / (1 + gain)) / float(prefill.sum())


def simulate_experiment(
    rng: np.random.Generator, shape: Shape, *, gain: float, blocks: int, disturbance: str = "normal",
    gains: Sequence[float] | None = None, level_gains: Sequence[Sequence[float]] | None = None,
    throughput_loss: float = 0.0, noise: Noise | None = None,
) -> Experiment:  # fmt: skip
    """One experiment with every arm in every block; the candidates gain `gain` (or `gains`, one per
    candidate, or `level_gains`, one per candidate and level: a speedup that depends on concurrency).
    With `throughput_loss` the candidates' requests also wait before their first token (a queue, as
    an arm with fewer KV-cache tokens builds): their TPOT gains `gain`, while their E2E and output
    throughput end `throughput_loss` worse than the baseline's. `noise` adds the spreads and events of
    a Noise (none when None)."""
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
    if noise is not None:
        log_run = _noisy(rng, log_run, position, noise)
    effect = _effects(shape, gain, gains, level_gains)
    factor = np.exp(log_run)[..., None]
    decode_cost = (tokens - 1) * per_token * (1 + 0.15 * np.log2(levels))[None, None, :, None]
    decode = decode_cost * factor * np.exp(effect)[None, :, :, None]
    decode = decode * rng.lognormal(0.0, REQUEST_SD, (*size, PROMPTS))
    ttft = prefill * (1 + 0.3 * np.log2(levels))[None, None, :, None] * factor
    if throughput_loss:
        for i, level in enumerate(levels):
            level_prefill = prefill * (1 + 0.3 * math.log2(level))
            level_decode = decode_cost[0, 0, i]
            ttft[:, 2:, i] *= _queue_factor(level_prefill, level_decode, gain, throughput_loss)
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
