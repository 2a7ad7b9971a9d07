"""Do two runs of the same protocol agree? Compares the stored speedups of two finished
experiments cell by cell (arm label, metric, concurrency level) and prints:

- faster↔slower flips: a cell called faster in one and slower in the other (target: none);
- agreement of the words (the same outcome in both);
- the share of cells whose point estimate lies inside the other run's interval, both ways
  (target: at least 90 %).

Run the same protocol twice (e.g. `./dev manage submit_demo --owner admin` twice, one after
the other), then, against the database `./dev services` starts:

    eval "$(./dev env)" && .venv/bin/python scripts/check_repeat_agreement.py FIRST_ID SECOND_ID
"""

import argparse
import sys
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
django.setup()

from experiments.measurement.stats import verdicts  # noqa: E402
from experiments.models import SpeedupEstimate  # noqa: E402


def _cells(experiment_id: int) -> dict[tuple[str, str, int], SpeedupEstimate]:
    rows = SpeedupEstimate.objects.filter(experiment_id=experiment_id).select_related("arm")
    return {(s.arm.label, s.metric, s.concurrency): s for s in rows}


def _inside(point: float | None, other: SpeedupEstimate) -> bool | None:
    if point is None or other.ci_low is None or other.ci_high is None:
        return None
    return other.ci_low <= point <= other.ci_high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=int)
    parser.add_argument("second", type=int)
    args = parser.parse_args()
    first, second = _cells(args.first), _cells(args.second)
    keys = sorted(first.keys() & second.keys())
    print(f"{'arm':>28} {'metric':>18} {'level':>5}  {'first':>34}  {'second':>34}  inside")
    flips = same = 0
    inside = []
    for key in keys:
        a, b = first[key], second[key]
        both_ways = [_inside(a.point, b), _inside(b.point, a)]
        inside += [value for value in both_ways if value is not None]
        flips += {a.outcome, b.outcome} == {verdicts.FASTER, verdicts.SLOWER}
        same += a.outcome == b.outcome
        shown = [
            f"{s.outcome} {s.point:.3f} [{s.ci_low or 0:.3f}, {s.ci_high or 0:.3f}]" if s.point else s.outcome
            for s in (a, b)
        ]
        marks = "".join("·" if v is None else ("y" if v else "n") for v in both_ways)
        print(f"{key[0]:>28} {key[1]:>18} {key[2]:>5}  {shown[0]:>34}  {shown[1]:>34}  {marks}")
    print(f"\n{len(keys)} cells; same word in {same}; faster↔slower flips: {flips}")
    if inside:
        share = sum(inside) / len(inside)
        print(f"point estimate inside the other run's interval: {sum(inside)} of {len(inside)} ({share:.0%})")


if __name__ == "__main__":
    main()
