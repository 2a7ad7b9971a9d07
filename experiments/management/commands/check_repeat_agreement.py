"""Do two runs of the same protocol agree? Compares the stored speedups of two finished
experiments cell by cell (arm label, metric, concurrency level) and prints:

- faster↔slower flips: a cell called faster in one and slower in the other (target: none);
- agreement of the words (the same outcome in both);
- the share of cells whose point estimate lies inside the other run's interval, both ways
  (target: at least 90 %).

Run the same protocol twice (e.g. `./dev manage submit_demo --owner admin` twice, one after
the other), then:

    ./dev manage check_repeat_agreement FIRST_ID SECOND_ID
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from experiments.measurement.stats import verdicts
from experiments.models import SpeedupEstimate


def _cells(experiment_id: int) -> dict[tuple[str, str, int], SpeedupEstimate]:
    rows = SpeedupEstimate.objects.filter(experiment_id=experiment_id).select_related("arm")
    return {(s.arm.label, s.metric, s.concurrency): s for s in rows}


def _inside(point: float | None, other: SpeedupEstimate) -> bool | None:
    if point is None or other.ci_low is None or other.ci_high is None:
        return None
    return other.ci_low <= point <= other.ci_high


def _shown(estimate: SpeedupEstimate) -> str:
    if not estimate.point:
        return estimate.outcome
    return f"{estimate.outcome} {estimate.point:.3f} [{estimate.ci_low or 0:.3f}, {estimate.ci_high or 0:.3f}]"


class Command(BaseCommand):
    help = "Whether two experiments of one protocol agree, cell by cell."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("first", type=int)
        parser.add_argument("second", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        first, second = _cells(options["first"]), _cells(options["second"])
        keys = sorted(first.keys() & second.keys())
        self.stdout.write(f"{'arm':>28} {'metric':>18} {'level':>5}  {'first':>34}  {'second':>34}  inside")
        flips = same = 0
        inside: list[bool] = []
        for key in keys:
            a, b = first[key], second[key]
            both_ways = [_inside(a.point, b), _inside(b.point, a)]
            inside += [value for value in both_ways if value is not None]
            flips += {a.outcome, b.outcome} == {verdicts.FASTER, verdicts.SLOWER}
            same += a.outcome == b.outcome
            marks = "".join("·" if v is None else ("y" if v else "n") for v in both_ways)
            self.stdout.write(f"{key[0]:>28} {key[1]:>18} {key[2]:>5}  {_shown(a):>34}  {_shown(b):>34}  {marks}")
        self.stdout.write(f"\n{len(keys)} cells; same word in {same}; faster↔slower flips: {flips}")
        if inside:
            share = sum(inside) / len(inside)
            self.stdout.write(
                f"point estimate inside the other run's interval: {sum(inside)} of {len(inside)} ({share:.0%})"
            )
