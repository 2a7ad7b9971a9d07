"""How often a cell's verdict is wrong: experiments with known effects, simulated and pushed
through the same inference code the page uses (experiments/measurement/stats/inference.py and
experiments/measurement/stats/verdicts.py), in the execution order the worker uses
(experiments/measurement/planning/schedule.py).

Each simulated experiment has a baseline, an A/A replicate (no effect by construction) and
one arm whose true speedup is 1 + effect, at one concurrency level. A request's TPOT is

    prompt's own cost × arm effect × server start × run × drift(t) × request noise

with lognormal server-start, run and request factors (Noise), and a drift of the host that
grows linearly over the experiment's execution order (t from 0 to 1). A run's output
throughput is proportional to 1 / (its mean TPOT), with its own run noise. Blocks follow the
worker's randomised schedule; with `server_per_block=False` every arm runs through all its
blocks back to back on one server, as the option does.
"""

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np

from experiments.measurement.planning.schedule import schedule
from experiments.measurement.stats import inference

BASELINE, REPLICATE, ARM = 0, 1, 2
LEVEL = 4
PROMPTS = 40
PROMPT_SPREAD = 0.3  # lognormal sd of the prompts' own cost
MARGIN = 0.02
DEFAULT_BLOCKS = 3
METRICS = ("tpot", "output_throughput")

Counts = dict[tuple[str, str], Counter[str]]  # (compared arm: "arm" or "replicate", metric) -> outcomes


@dataclass(frozen=True)
class Noise:
    start: float  # lognormal sd of a server start
    run: float  # lognormal sd of a run on a server
    request: float  # lognormal sd of one request
    drift: float  # total drift of the host over the experiment, as a fraction

    def __str__(self) -> str:
        return f"start {self.start:.0%} run {self.run:.0%} request {self.request:.0%} drift {self.drift:+.0%}"


NOISE_GRID = [
    Noise(start, run, request, drift)
    for start, run, request, drift in itertools.product((0.01, 0.03, 0.05), (0.01, 0.03), (0.02, 0.10), (0.0, 0.10))
]
TYPICAL = Noise(0.03, 0.02, 0.05, 0.10)


def _runs(
    rng: np.random.Generator, *, effect: float, blocks: int, noise: Noise, server_per_block: bool
) -> list[inference.RunData]:
    slots = schedule(
        n_arms=3, levels=[LEVEL], blocks=blocks, seed=int(rng.integers(1 << 31)), server_per_block=server_per_block
    )
    prompt_cost = rng.lognormal(0.0, PROMPT_SPREAD, PROMPTS) * 20.0
    true_factor = {BASELINE: 1.0, REPLICATE: 1.0, ARM: 1.0 / (1.0 + effect)}
    session_factor: dict[object, float] = {}
    runs = []
    for position, slot in enumerate(slots):
        session = (slot.block, slot.arm_index) if server_per_block else slot.arm_index
        if session not in session_factor:
            session_factor[session] = rng.lognormal(0.0, noise.start)
        drift = 1.0 + noise.drift * position / max(1, len(slots) - 1)
        run_factor = rng.lognormal(0.0, noise.run) * session_factor[session] * drift * true_factor[slot.arm_index]
        tpot = prompt_cost * run_factor * rng.lognormal(0.0, noise.request, PROMPTS)
        throughput = 1000.0 * LEVEL / float(np.mean(tpot)) * rng.lognormal(0.0, noise.run / 2)
        runs.append(
            inference.RunData(
                arm=slot.arm_index,
                level=slot.level,
                block=slot.block,
                latencies={"tpot": dict(enumerate(tpot.tolist()))},
                throughputs={"output_throughput": throughput},
                # Outputs of equal length: the pooled per-token TPOT ratio is then the ratio of means.
                output_tokens=dict.fromkeys(range(PROMPTS), 64),
            )
        )
    return runs


def simulate(
    rng: np.random.Generator, *, effect: float, blocks: int, noise: Noise, n: int, server_per_block: bool = True
) -> Counts:
    """Outcome counts per compared arm ("arm", "replicate") and metric over n experiments."""
    counts: Counts = {(who, metric): Counter() for who in ("arm", "replicate") for metric in METRICS}
    for _ in range(n):
        runs = _runs(rng, effect=effect, blocks=blocks, noise=noise, server_per_block=server_per_block)
        cells = inference.speedup_cells(
            runs, baseline=BASELINE, arms=[REPLICATE, ARM], levels=[LEVEL], margin=MARGIN, metrics=METRICS
        )
        for cell in cells:
            counts[("arm" if cell.arm == ARM else "replicate", cell.metric)][cell.outcome] += 1
    return counts
