"""The break-even search against a fixed grid of the same resolution on this machine's real
worker: the demo pair (the target and its draft model, which `./dev up` builds) at one k, the
same prompts, sampling and design, one experiment searching the range, one measuring every level
of its grid in every block until each is settled (as specdash runs listed levels). Prints for each
the blocks, levels, runs and server starts, the device-minutes (start-ups and runs, as
experiments/analysis/device_time.py counts them) and the answer (planner.state_of over the grid:
the bracket of settled words and where the points cross 1 inside it), and what the search saved.

    ./dev up        # a worker on the cpu queue; the demo experiment may run first
    eval "$(./dev env)"
    .venv/bin/python scripts/bench_planner_real.py [--k 10] [--high 16] [--max-blocks 8] [--gain 0.07]

The two experiments run one after the other on the one worker (about an hour on the 2-core
development machine at the defaults). The prompts are an uploaded set of the built-in code edits
and chat turns (4 × the range's top level are measured per run, none sent twice). With
--experiments A B the script prints two experiments it ran before instead of submitting.
"""

import argparse
import sys
import time
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402

from experiments.analysis import device_time, primary  # noqa: E402
from experiments.analysis.loader import load_runs  # noqa: E402
from experiments.definition import services as definition  # noqa: E402
from experiments.definition.services import ArmSpec  # noqa: E402
from experiments.measurement.planning import planner  # noqa: E402
from experiments.measurement.stats import break_even  # noqa: E402
from experiments.models import Arm, Experiment  # noqa: E402
from experiments.prompt_sets.services import prompt_set_from_builtin  # noqa: E402

PROMPTS_PER_LEVEL = 4


def _submit(owner, args, *, search: bool) -> Experiment:
    models = settings.SPECDASH_MODELS_DIR
    grid = planner.SearchRange(1, args.high, args.resolution).grid()
    fields = {
        "name": f"bench: {'search' if search else 'fixed grid'} 1-{args.high} at {args.resolution:g}, draft k={args.k}",
        "target_model": str(models / "target"), "worker_queue": args.queue, "dtype": "float32", "max_model_len": 512,
        "workload_kind": Experiment.WorkloadKind.UPLOADED,
        "uploaded_prompt_set": prompt_set_from_builtin(
            owner=owner, name="bench-search", count=PROMPTS_PER_LEVEL * args.high + 2
        ),
        "num_prompts": PROMPTS_PER_LEVEL * args.high, "max_tokens": args.max_tokens, "ignore_eos": True,
        "temperature": 0.0, "warmup_requests": 2, "repetitions": args.max_blocks, "sequential": True,
        "server_per_block": True, "aa_replicate": False, "seed": args.seed, "worthwhile_gain": args.gain,
        "concurrency_levels": [1, args.high] if search else list(grid),
    }  # fmt: skip
    if search:
        fields |= {"search_low": 1, "search_high": args.high, "search_resolution": args.resolution}
    draft = ArmSpec(
        method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=args.k, params={"model": str(models / "draft")}
    )
    return definition.experiment_create(owner=owner, arms=[draft], **fields)


def _wait(experiments: list[Experiment]) -> list[Experiment]:
    ids = [experiment.id for experiment in experiments]
    while Experiment.objects.filter(id__in=ids, status__in=Experiment.ACTIVE_STATUSES).exists():
        done = Experiment.objects.filter(id__in=ids).exclude(status__in=Experiment.ACTIVE_STATUSES).count()
        print(f"  {time.strftime('%H:%M:%S')} {done} of {len(ids)} finished", flush=True)
        time.sleep(60)
    return [Experiment.objects.get(id=id_) for id_ in ids]


def _answer(experiment: Experiment, grid: tuple[int, ...]) -> str:
    decided = primary.primary_decisions(experiment, load_runs(experiment), final=True)
    words = {d.key[1]: planner.Word(d.outcome, d.estimate.point) for d in decided.candidates}
    state, bracket = planner.state_of(grid, words)
    text = f"{state}: faster up to {bracket.below}, not faster at {bracket.above}"
    low, high = (words.get(level) for level in (bracket.below, bracket.above))
    if low and high and low.point and high.point:
        crossing = break_even.log_crossing(bracket.below, low.point, bracket.above, high.point)
        text += f", points cross 1 at {crossing:.1f}" if crossing else ""
    return text + "; " + ", ".join(f"{level}: {word.outcome}" for level, word in sorted(words.items()))


def report(search: Experiment, fixed: Experiment) -> None:
    grid = planner.SearchRange(1, max(fixed.concurrency_levels), search.search_resolution or 2.0).grid()
    print("\nrule        status    blocks levels  runs starts  start-min  run-min  dev-min  answer")
    minutes = {}
    for name, experiment in (("search", search), ("fixed grid", fixed)):
        spent = device_time.spent(experiment).recorded
        runs = experiment.runs.filter(arm__confirms__isnull=True)
        blocks = max(runs.values_list("repetition", flat=True), default=0)
        minutes[name] = spent.minutes
        print(
            f"{name:<11} {experiment.status:<9} {blocks:>6} {len(experiment.concurrency_levels):>6} {runs.count():>5}"
            f" {spent.starts:>6} {spent.start_minutes:>10.1f} {spent.load_minutes:>8.1f} {spent.minutes:>8.1f}"
            f"  {_answer(experiment, grid)}"
        )
    confirmations = search.arms.exclude(confirms=None).count()
    print(f"\nthe search spent {minutes['search']:.1f} device-minutes"
          f"{' (its confirmation arm included)' if confirmations else ''}, the fixed grid {minutes['fixed grid']:.1f}: "
          f"{minutes['fixed grid'] / max(minutes['search'], 1e-9):.2f}× as much")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    parser.add_argument("--experiments", type=int, nargs=2, metavar=("SEARCH", "FIXED"), help="report these instead")
    args = parser.parse_args(argv)
    if args.experiments:
        report(*(Experiment.objects.get(id=id_) for id_ in args.experiments))
        return
    owner = get_user_model().objects.get(username=args.owner)
    began = time.monotonic()
    search, fixed = _submit(owner, args, search=True), _submit(owner, args, search=False)
    print(f"submitted experiments {search.id} (search) and {fixed.id} (fixed grid)", flush=True)
    report(*_wait([search, fixed]))
    print(f"\n{(time.monotonic() - began) / 60:.0f} min of wall time")


if __name__ == "__main__":
    main()
