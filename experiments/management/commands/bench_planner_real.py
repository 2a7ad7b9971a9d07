"""The break-even search against a fixed grid of the same resolution on this machine's real
worker: the demo pair (the target and its draft model, which `./dev up` builds) at one k, the
same prompts, sampling and design, one experiment searching the range, one measuring every level
of its grid in every block until each is settled (as specdash runs listed levels). Prints for each
the blocks, levels, runs and server starts, the device-minutes (start-ups and runs, as
experiments/analysis/device_time.py counts them) and the answer (planner.state_of over the grid:
the bracket of settled words and where the points cross 1 inside it), and what the search saved.

    ./dev up        # a worker on the cpu queue; the demo experiment may run first
    ./dev manage bench_planner_real [--k 10] [--high 16] [--max-blocks 8] [--gain 0.07]

The two experiments run one after the other on the one worker (about an hour on the 2-core
development machine at the defaults). The prompts are an uploaded set of the built-in code edits
and chat turns (4 × the range's top level are measured per run, none sent twice). With
--experiments A B the command prints two experiments it ran before instead of submitting.
"""

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandParser

from experiments.analysis import device_time, primary
from experiments.analysis.loader import load_runs
from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.measurement.planning import planner
from experiments.measurement.stats import break_even
from experiments.models import Arm, Experiment
from experiments.prompt_sets.services import prompt_set_from_builtin

PROMPTS_PER_LEVEL = 4


def _submit(owner: User, options: dict[str, Any], *, search: bool) -> Experiment:
    models = settings.SPECDASH_MODELS_DIR
    high, resolution, k = options["high"], options["resolution"], options["k"]
    grid = planner.SearchRange(1, high, resolution).grid()
    fields = {
        "name": f"bench: {'search' if search else 'fixed grid'} 1-{high} at {resolution:g}, draft k={k}",
        "target_model": str(models / "target"), "worker_queue": options["queue"], "dtype": "float32",
        "max_model_len": 512, "workload_kind": Experiment.WorkloadKind.UPLOADED,
        "uploaded_prompt_set": prompt_set_from_builtin(
            owner=owner, name="bench-search", count=PROMPTS_PER_LEVEL * high + 2
        ),
        "num_prompts": PROMPTS_PER_LEVEL * high, "max_tokens": options["max_tokens"], "ignore_eos": True,
        "temperature": 0.0, "warmup_requests": 2, "repetitions": options["max_blocks"], "sequential": True,
        "server_per_block": True, "aa_replicate": False, "seed": options["seed"], "worthwhile_gain": options["gain"],
        "concurrency_levels": [1, high] if search else list(grid),
    }  # fmt: skip
    if search:
        fields |= {"search_low": 1, "search_high": high, "search_resolution": resolution}
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=k, params={"model": str(models / "draft")})
    return definition.experiment_create(owner=owner, arms=[draft], **fields)


def _wait(experiments: list[Experiment], write: Callable[[str], None]) -> list[Experiment]:
    ids = [experiment.id for experiment in experiments]
    while Experiment.objects.filter(id__in=ids, status__in=Experiment.ACTIVE_STATUSES).exists():
        done = Experiment.objects.filter(id__in=ids).exclude(status__in=Experiment.ACTIVE_STATUSES).count()
        write(f"  {time.strftime('%H:%M:%S')} {done} of {len(ids)} finished")
        time.sleep(60)
    return [Experiment.objects.get(id=id_) for id_ in ids]


def answer(experiment: Experiment, grid: tuple[int, ...]) -> str:
    """The bracket the experiment's final words settle on the grid, where the points cross 1
    inside it, and each level's word."""
    decided = primary.primary_decisions(experiment, load_runs(experiment), final=True)
    words = {d.key[1]: planner.Word(d.outcome, d.estimate.point) for d in decided.candidates}
    state, bracket = planner.state_of(grid, words)
    text = f"{state}: faster up to {bracket.below}, not faster at {bracket.above}"
    low = words.get(bracket.below) if bracket.below is not None else None
    high = words.get(bracket.above) if bracket.above is not None else None
    if low and high and low.point and high.point and bracket.below and bracket.above:
        crossing = break_even.log_crossing(bracket.below, low.point, bracket.above, high.point)
        text += f", points cross 1 at {crossing:.1f}" if crossing else ""
    return text + "; " + ", ".join(f"{level}: {word.outcome}" for level, word in sorted(words.items()))


def report(search: Experiment, fixed: Experiment) -> list[str]:
    """Each rule's blocks, levels, runs, starts, device-minutes and answer, and what the search saved."""
    grid = planner.SearchRange(1, max(fixed.concurrency_levels), search.search_resolution or 2.0).grid()
    lines = ["\nrule        status    blocks levels  runs starts  start-min  run-min  dev-min  answer"]
    minutes = {}
    for name, experiment in (("search", search), ("fixed grid", fixed)):
        spent = device_time.spent(experiment).recorded
        runs = experiment.runs.filter(arm__confirms__isnull=True)
        blocks = max(runs.values_list("repetition", flat=True), default=0)
        minutes[name] = spent.minutes
        lines.append(
            f"{name:<11} {experiment.status:<9} {blocks:>6} {len(experiment.concurrency_levels):>6} {runs.count():>5}"
            f" {spent.starts:>6} {spent.start_minutes:>10.1f} {spent.load_minutes:>8.1f} {spent.minutes:>8.1f}"
            f"  {answer(experiment, grid)}"
        )
    confirmations = search.arms.exclude(confirms=None).count()
    saved = minutes["fixed grid"] / max(minutes["search"], 1e-9)
    included = " (its confirmation arm included)" if confirmations else ""
    lines.append(
        f"\nthe search spent {minutes['search']:.1f} device-minutes{included}, the fixed grid "
        f"{minutes['fixed grid']:.1f}: {saved:.2f}× as much"
    )
    return lines


class Command(BaseCommand):
    help = "The break-even search against a fixed grid on this machine's real worker, in device-minutes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--k", type=int, default=10, help="the draft model arm's k")
        parser.add_argument("--high", type=int, default=16, help="the range's top level (from 1)")
        parser.add_argument("--resolution", type=float, default=2.0)
        parser.add_argument("--max-blocks", type=int, default=8)
        parser.add_argument("--max-tokens", type=int, default=16)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--gain", type=float, default=0.07, help="the smallest gain worth deploying (the search leans at 1 + it)"
        )
        parser.add_argument("--queue", default="cpu")
        parser.add_argument("--owner", default="admin")
        parser.add_argument(
            "--experiments", type=int, nargs=2, metavar=("SEARCH", "FIXED"), help="report these instead"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["experiments"]:
            search, fixed = (Experiment.objects.get(id=id_) for id_ in options["experiments"])
            self.stdout.write("\n".join(report(search, fixed)))
            return
        owner = get_user_model().objects.get(username=options["owner"])
        began = time.monotonic()
        search, fixed = _submit(owner, options, search=True), _submit(owner, options, search=False)
        self.stdout.write(f"submitted experiments {search.id} (search) and {fixed.id} (fixed grid)")
        self.stdout.write("\n".join(report(*_wait([search, fixed], self.stdout.write))))
        self.stdout.write(f"\n{(time.monotonic() - began) / 60:.0f} min of wall time")
