"""How often the question's decisions are wrong, and what they cost: the tables of
scripts/check_decisions.py, over whole experiments with known effects (simulator.py) decided
as the page and the worker decide them (decisions.py).

"Boundaries" runs the same experiments through Pocock's boundary and spending boundaries of
the power family (sequential.look_levels) to choose between them.
"""

import contextlib
import time
from collections.abc import Collection

import numpy as np

from experiments.measurement.stats import sequential
from experiments.simulation.decisions import (
    DEFAULT_MAX_BLOCKS,
    DEFAULT_WORTHWHILE,
    block_spread,
    design_of,
    naive_level,
    run_fixed,
    run_sequential,
)
from experiments.simulation.max_t import max_t
from experiments.simulation.simulator import DEMO, DISTURBANCES, LARGE, METRIC, Shape, simulate_experiment
from experiments.simulation.speed import memoised, patched
from experiments.simulation.tally import CALLED, Tally

FIXED_MAX = 16  # the longest fixed design tried for "equal power"
TABLES = ("null", "power", "max-t", "defaults", "boundaries")


def _pct(value: float) -> str:
    return f"{value:>7.1%}"


def _size(n: int, shape: Shape) -> int:
    """Experiments per row: half as many of the larger shape, which costs three times as much."""
    return n if shape is DEMO else max(50, n // 2)


def _design_text(design: sequential.Design) -> str:
    return (
        f"sequential, at most {design.max_blocks} blocks, margin {design.margin:.0%}, "
        f"worth it from {design.worthwhile_gain:.0%}, metric {METRIC}"
    )


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
            for name in ("holm", "max-t"):
                with max_t() if name == "max-t" else contextlib.nullcontext():
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


def print_tables(*, experiments: int, seed: int, only: Collection[str] = TABLES) -> None:
    """The tables named in `only`, `experiments` per row of the no-effect table (fewer in the
    others), then the time they took."""
    rng = np.random.default_rng(seed)
    design = design_of()
    began = time.monotonic()
    with memoised():
        if "null" in only:
            no_effect_table(rng, experiments, design)
        if "power" in only:
            rows = [(shape, gain, "normal") for shape in (DEMO, LARGE) for gain in (0.05, 0.10, 0.20)]
            rows += [(DEMO, 0.10, disturbance) for disturbance in DISTURBANCES if disturbance != "normal"]
            power_table(rng, max(50, experiments // 2), design, rows)
        if "max-t" in only:
            # The max-t level is Pocock's (max_t._max_t_level): Holm is compared on the same boundary.
            max_t_table(rng, max(50, experiments // 4), design_of(spending=None))
        if "defaults" in only:
            defaults_table(rng, max(50, experiments // 4))
        if "boundaries" in only:
            boundaries_table(rng, max(50, experiments // 2))
    print(f"\n{time.monotonic() - began:.0f} s; seed {seed}")
