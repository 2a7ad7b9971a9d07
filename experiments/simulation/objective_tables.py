"""The joint word's error and power (experiments/measurement/stats/objective.py), by simulating
whole experiments through the code the page and the worker use (question.question_decisions with
the objective's guards, the sequential looks of experiments/simulation/decisions.py).

Rows, each under the interactive objective (primary engine TPOT; E2E and output throughput
guarded, margin 5 %):
- nothing differs: a false "pays" anywhere in the family (any candidate cell);
- the primary gains 20 % while the arms' requests queue, so E2E and output throughput lose 10 %:
  a false "pays" anywhere in the family (each guard is truly worse than its margin);
- the primary gains 50 % and the guards lose exactly their margin (5 %), the hardest case for
  the guards' test: a false "pays" anywhere in the family;
- the primary gains 10 %, 20 % or 50 % and nothing else differs (E2E and throughput gain through
  their decode part): the cells that pay, beside the cells the primary alone calls faster — the
  power the guards cost.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from experiments.measurement.stats import objective, sequential
from experiments.simulation import decisions, simulator

GUARDS = objective.PRESETS["interactive"].guards
ROWS: tuple[tuple[str, float, float], ...] = (
    ("nothing differs", 0.0, 0.0),
    ("TPOT +20 %, E2E and throughput -10 % (a queue)", 0.2, 0.1),
    ("TPOT +50 %, E2E and throughput -5 % (at the margin)", 0.5, 0.05),
    ("TPOT +10 %, nothing else", 0.1, 0.0),
    ("TPOT +20 %, nothing else", 0.2, 0.0),
    ("TPOT +50 %, nothing else", 0.5, 0.0),
)
SHAPES = (("demo's (2 arms x 2 levels, at most 4 blocks)", 4), ("at most 10 blocks", 10))


@dataclass
class JointTally:
    """Over the experiments of one row: family-wise false words and the cells' words."""

    experiments: int = 0
    family_pays: int = 0  # some candidate cell pays
    family_faster: int = 0  # some candidate cell is called faster on the primary
    cells: int = 0
    cells_pays: int = 0
    cells_faster: int = 0
    cells_costs: int = 0
    blocks: int = 0

    def add(self, result: decisions.Result) -> None:
        joint, primary = result.decided.joint, result.decided.candidates
        self.experiments += 1
        self.family_pays += any(j.word == objective.PAYS for j in joint)
        self.family_faster += any(d.outcome == sequential.FASTER for d in primary)
        self.cells += len(joint)
        self.cells_pays += sum(j.word == objective.PAYS for j in joint)
        self.cells_faster += sum(d.outcome == sequential.FASTER for d in primary)
        self.cells_costs += sum(j.word == objective.COSTS for j in joint)
        self.blocks += result.blocks

    def share(self, count: int, of: int) -> float:
        return count / of if of else 0.0


def tally_row(
    *, gain: float, loss: float, max_blocks: int, experiments: int, seed: int, guards: tuple[objective.Guard, ...]
) -> JointTally:
    """`experiments` simulated experiments of the demo's shape, decided with `guards`."""
    rng = np.random.default_rng(seed)
    design = decisions.design_of(max_blocks)
    tally = JointTally()
    for _ in range(experiments):
        drawn = simulator.simulate_experiment(
            rng, simulator.DEMO, gain=gain, blocks=max_blocks, throughput_loss=loss
        )  # fmt: skip
        tally.add(decisions.run_sequential(drawn, simulator.DEMO, design, guards=guards))
    return tally


def table_lines(*, experiments: int, seed: int) -> Iterator[str]:
    """The table, a line at a time (each row a few seconds per 100 experiments)."""
    yield (
        f"{'shape':46} {'truth':48} {'fam. false pays':>15} {'fam. faster':>11} {'cells pay':>9} "
        f"{'cells faster':>12} {'costs':>6} {'blocks':>6}"
    )
    for shape_name, max_blocks in SHAPES:
        for row, (truth, gain, loss) in enumerate(ROWS):
            t = tally_row(gain=gain, loss=loss, max_blocks=max_blocks, experiments=experiments, seed=seed + row,
                          guards=GUARDS)  # fmt: skip
            false_pays = f"{t.share(t.family_pays, t.experiments):.1%}" if gain == 0 or loss else "-"
            yield (
                f"{shape_name:46} {truth:48} {false_pays:>15} {t.share(t.family_faster, t.experiments):>11.1%} "
                f"{t.share(t.cells_pays, t.cells):>9.1%} {t.share(t.cells_faster, t.cells):>12.1%} "
                f"{t.share(t.cells_costs, t.cells):>6.1%} {t.blocks / t.experiments:>6.2f}"
            )
