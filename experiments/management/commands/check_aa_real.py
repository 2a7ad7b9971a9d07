"""A/A on real data: every stored experiment with an A/A replicate, its baseline against the
replicate pushed through the decisions of its question (experiments/measurement/stats/question.py),
as if the replicate were the only candidate. Nothing differs between the two, so every
*faster* or *slower* is a false call; the command counts the experiments with one (the
family: the replicate's cells at every level) per metric, for a fixed design at the blocks
each experiment ran and for the sequential design replayed over its stored blocks (the
looks from the third block on, at most the blocks it ran).

    ./dev manage check_aa_real [--worthwhile 0.05]
"""

from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from experiments.analysis.loader import load_runs
from experiments.measurement.stats import inference, question, sequential
from experiments.models import Experiment

METRICS = ("server_tpot", "tpot", "e2e", "output_throughput")
CALLED = (sequential.FASTER, sequential.SLOWER)


def replicate_decisions(
    experiment: Experiment, runs: list[inference.RunData], metric: str, design: sequential.Design,
    levels: tuple[int, ...],
) -> list[question.Decision]:  # fmt: skip
    """The replicate's cells on `metric`, decided as the question decides a candidate's."""
    arms = list(experiment.arms.compared_or_baseline())
    baseline = next(arm.id for arm in arms if arm.is_baseline)
    replicate = next(arm.id for arm in arms if arm.is_replicate)
    pair = [run for run in runs if run.arm in (baseline, replicate)]
    cells = inference.speedup_cells(
        pair, baseline=baseline, arms=[replicate], levels=list(levels), margin=experiment.equivalence_margin,
        metrics=[metric], fixed_arrival_rate=bool(experiment.request_rate),
    )  # fmt: skip
    asked = question.Question(metric, levels, design)
    decided = question.question_decisions(
        pair, cells, baseline=baseline, candidates=[replicate], replicate=None, question=asked, final=True
    )
    return decided.candidates


class Command(BaseCommand):
    help = "A/A on real data: the family-wise false calls of the stored A/A replicates, per metric and design."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--worthwhile", type=float, default=0.05, help="the worthwhile gain of the sequential design"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # Only what the decisions read: a database a migration behind still answers.
        experiments = Experiment.objects.filter(arms__is_replicate=True).distinct().order_by("id")
        experiments = experiments.only("id", "equivalence_margin", "request_rate", "temperature")
        counts: dict[tuple[str, str], Counter[str]] = {}
        seen = 0
        for experiment in experiments:
            seen += self._experiment(experiment, options["worthwhile"], counts)
        self.stdout.write(f"\n{seen} experiment(s) with an A/A replicate and at least {sequential.FIRST_LOOK} blocks")
        self.stdout.write(f"{'metric':>18} {'design':>10} {'family-wise calls':>18}  outcomes of the replicate's cells")
        for (metric, name), tally in counts.items():
            family = tally.pop("family")
            outcomes = ", ".join(f"{k} {v}" for k, v in tally.items())
            self.stdout.write(f"{metric:>18} {name:>10} {family:>9} of {seen:<6}  {outcomes}")

    def _experiment(
        self, experiment: Experiment, worthwhile: float, counts: dict[tuple[str, str], Counter[str]]
    ) -> int:
        """Count one experiment's calls into `counts` and print its words; 0 when it has too few blocks."""
        runs = load_runs(experiment)
        blocks = max((run.block for run in runs), default=0)
        if blocks < sequential.FIRST_LOOK:
            self.stdout.write(
                f"experiment {experiment.id}: {blocks} block(s) recorded, fewer than a look needs; left out"
            )
            return 0
        levels = tuple(sorted({run.level for run in runs}))
        designs = {
            "fixed": sequential.Design(blocks, False, experiment.equivalence_margin, worthwhile),
            "sequential": sequential.Design(blocks, True, experiment.equivalence_margin, worthwhile),
        }
        words = []
        for metric in METRICS:
            for name, design in designs.items():
                outcomes = [d.outcome for d in replicate_decisions(experiment, runs, metric, design, levels)]
                tally = counts.setdefault((metric, name), Counter())
                tally["family"] += any(o in CALLED for o in outcomes)
                tally.update(outcomes)
                words.append(f"{metric}/{name}: {', '.join(outcomes)}")
        self.stdout.write(f"experiment {experiment.id} ({blocks} blocks, levels {list(levels)}): " + "; ".join(words))
        return 1
