"""Run the demo experiment N times, one after the other, and say how often it decides.

Per run: its wall time (submitted to finished), the blocks it ran, its vLLM server starts
(and their mean start time) and the word of every primary cell, with the primary metric's
speedup and interval: the joint word of the demo's
objective (pays, costs, not worth it, open or inconclusive; the primary metric's own word for a
cell without one). Then the settle rate (the share of runs in which every primary cell was
settled: any word but open, inconclusive or too few blocks), each cell's own rate, and the
median and longest wall time. Issue 37 asks for
every primary cell settled in at least 4 of 5 runs, each within 15 minutes of `up` being ready.

On a fresh `./dev up`, which submits the first demo:

    ./dev manage check_demo --runs 5

The demo `up` submitted counts as the first run while it is unfinished; the others are
submitted one at a time once the previous one ends (two at once would share the worker's
cores). `python -m scripts.check_demo` does the same from a fresh clone, `up` included.
The demo's shape is submit_demo's: this command only measures it.
"""

import statistics
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from experiments.definition import services as definition
from experiments.management.commands.submit_demo import DEMO_NAME, demo_arms, demo_fields
from experiments.measurement.stats import sequential, verdicts
from experiments.models import Experiment, Run

UNSETTLED = (sequential.OPEN, sequential.INCONCLUSIVE, verdicts.TOO_FEW_BLOCKS)
POLL_S = 10.0


def _question(experiment: Experiment) -> dict:
    analysis = getattr(experiment, "analysis", None)
    return analysis.series.get("question", {}) if analysis else {}


def cell_word(cell: dict) -> str:
    """The word the demo answers with: the objective's joint word, else the primary metric's."""
    joint = cell.get("joint") or {}
    return joint.get("word") or cell["outcome"]


def run_row(experiment: Experiment) -> dict:
    """What one finished demo says: its time, blocks, server starts and primary cells' words."""
    runs = Run.objects.filter(experiment=experiment, server_start_s__isnull=False)
    starts = [start for start in runs.values_list("server_start_s", flat=True) if start is not None]
    end = experiment.finished_at or experiment.created_at
    question = _question(experiment)
    cells = question.get("cells", [])
    return {
        "id": experiment.id,
        "status": experiment.status,
        "wall_s": (end - experiment.created_at).total_seconds(),
        "blocks": question.get("blocks_run", 0),
        "server_starts": len(starts),
        "mean_start_s": statistics.fmean(starts) if starts else None,
        "words": {f"{c['arm']} @ {c['level']}": cell_word(c) for c in cells},
        "figures": {f"{c['arm']} @ {c['level']}": c.get("figure", "") for c in cells},
        "settled": bool(cells) and experiment.status == Experiment.Status.FINISHED
        and all(cell_word(c) not in UNSETTLED for c in cells),
    }  # fmt: skip


def summary(rows: list[dict]) -> list[str]:
    """The settle rate over the runs, per cell, and the wall times."""
    if not rows:
        return ["no finished run"]
    settled = sum(row["settled"] for row in rows)
    walls = [row["wall_s"] / 60 for row in rows]
    lines = [
        f"every primary cell settled in {settled} of {len(rows)} runs ({settled / len(rows):.0%})",
        f"wall time: median {statistics.median(walls):.1f} min, longest {max(walls):.1f} min; "
        f"server starts: mean {statistics.fmean(row['server_starts'] for row in rows):.1f} per run",
    ]
    for cell in sorted({cell for row in rows for cell in row["words"]}):
        words = [row["words"].get(cell, "missing") for row in rows]
        settled_here = sum(word not in UNSETTLED and word != "missing" for word in words)
        lines.append(f"  {cell}: settled in {settled_here} of {len(rows)} ({', '.join(words)})")
    return lines


def run_line(row: dict) -> str:
    start = f", {row['mean_start_s']:.0f} s each" if row["mean_start_s"] else ""
    figures = row.get("figures", {})
    words = "; ".join(
        f"{cell} {word}" + (f" ({figures[cell]})" if figures.get(cell) else "") for cell, word in row["words"].items()
    )
    return (
        f"#{row['id']} {row['status']}: {row['wall_s'] / 60:.1f} min, {row['blocks']} blocks, "
        f"{row['server_starts']} server starts{start}; {'settled' if row['settled'] else 'NOT settled'}: "
        f"{words or 'no primary cells'}"
    )


class Command(BaseCommand):
    help = "Run the demo N times, one after the other, and print its settle rate, wall times and server starts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=5)
        parser.add_argument("--owner", default="admin", help="username that submits the demos")
        parser.add_argument("--timeout-min", type=float, default=60.0, help="give up on a run after this long")

    def handle(self, *args: Any, **options: Any) -> None:
        owner = get_user_model().objects.filter(username=options["owner"]).first()
        if owner is None:
            raise CommandError(f"No user named {options['owner']!r}.")
        pending = Experiment.objects.filter(name=DEMO_NAME, status__in=Experiment.ACTIVE_STATUSES).order_by("id")
        first = pending.first()
        rows = []
        for number in range(1, options["runs"] + 1):
            experiment = first if number == 1 and first else self._submit(owner)
            self.stdout.write(f"run {number}: demo #{experiment.id}", ending="\n")
            self.stdout.flush()
            experiment = self._wait(experiment, options["timeout_min"] * 60)
            rows.append(run_row(experiment))
            self.stdout.write("  " + run_line(rows[-1]))
            self.stdout.flush()
        self.stdout.write("\n".join(summary(rows)))

    def _submit(self, owner) -> Experiment:
        return definition.experiment_create(owner=owner, arms=demo_arms(), **demo_fields())

    def _wait(self, experiment: Experiment, timeout_s: float) -> Experiment:
        deadline = time.monotonic() + timeout_s
        while experiment.status in Experiment.ACTIVE_STATUSES:
            if time.monotonic() > deadline:
                raise CommandError(f"Demo #{experiment.id} did not finish within {timeout_s / 60:.0f} minutes.")
            time.sleep(POLL_S)
            experiment = Experiment.objects.select_related("analysis").get(pk=experiment.pk)
        return experiment
