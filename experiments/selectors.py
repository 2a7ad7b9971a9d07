"""Everything that reads for a page."""

import json
from dataclasses import dataclass

from django.db.models import Count, Prefetch, Q, QuerySet

from experiments.models import Arm, Experiment, Run

ACTIVE_STATUSES = {Experiment.Status.QUEUED, Experiment.Status.RUNNING}


def experiment_list(*, status: str = "", owner=None, search: str = "") -> QuerySet[Experiment]:
    """Experiments newest first, with owner, arms and run counts loaded in a fixed number of queries."""
    experiments = (
        Experiment.objects.select_related("owner")
        .prefetch_related(Prefetch("arms", queryset=Arm.objects.order_by("position")))
        .annotate(
            runs_total=Count("runs"),
            runs_done=Count("runs", filter=~Q(runs__status__in=[Run.Status.QUEUED, Run.Status.RUNNING])),
        )
        .order_by("-created_at", "-id")
    )
    if status:
        experiments = experiments.filter(status=status)
    if owner is not None:
        experiments = experiments.filter(owner=owner)
    if search:
        experiments = experiments.filter(Q(name__icontains=search) | Q(target_model__icontains=search))
    return experiments


@dataclass(frozen=True)
class ArmProtocol:
    arm: Arm
    speculative_config_json: str


@dataclass(frozen=True)
class Progress:
    total: int
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.cancelled


def experiment_arms(*, experiment: Experiment) -> list[ArmProtocol]:
    return [
        ArmProtocol(arm=arm, speculative_config_json="" if arm.is_baseline else json.dumps(arm.speculative_config()))
        for arm in experiment.arms.order_by("position")
    ]


def experiment_runs(*, experiment: Experiment) -> QuerySet[Run]:
    return experiment.runs.select_related("arm").order_by("arm__position", "repetition", "concurrency")


def experiment_progress(*, experiment: Experiment) -> Progress:
    counts = experiment.runs.aggregate(
        total=Count("id"),
        **{status: Count("id", filter=Q(status=status)) for status in Run.Status.values},
    )
    return Progress(**counts)


def experiment_is_active(experiment: Experiment) -> bool:
    return experiment.status in ACTIVE_STATUSES


def experiment_warnings(*, experiment: Experiment) -> list[str]:
    """The benchmarking traps this protocol walks into (see DESIGN.md), stated on the page."""
    warnings = []
    if experiment.workload_kind == Experiment.WorkloadKind.SYNTHETIC:
        warnings.append(
            "Synthetic random-token prompts: acceptance on them says little about real traffic."
        )
    if experiment.ignore_eos:
        warnings.append("ignore_eos is on: outputs run past their natural end, which distorts acceptance.")
    if not experiment.is_greedy:
        warnings.append(
            f"Sampling at temperature {experiment.temperature:g}: not comparable with greedy results."
        )
    return warnings
