"""What the service profile pages read: the profiles of the user's teams, what the form
suggests, and a profile's evidence. The evidence is the team's finished experiments measured
by specdash (imported ones have no primary cells) on the profile's model and worker queue,
with each speculative arm's primary cells as the analysis stored them at the finish."""

import json
from collections import defaultdict
from dataclasses import dataclass

from django.db.models import QuerySet
from django.db.models.fields.json import KeyTransform

from experiments.measurement.deploy import service_bands
from experiments.measurement.stats import objective
from experiments.models import Arm, Decision, Experiment, RunSummary, ServiceProfile, SpeedupEstimate, UploadedPromptSet
from experiments.prompts import catalog

# RunSummary's p90 column per SLO metric (the client's times, as goodput counts them).
P90_COLUMNS = {"TTFT": "ttft_p90_ms", "TPOT": "tpot_p90_ms", "E2E": "e2e_p90_ms"}
RunP90s = dict[str, list[float]]


@dataclass(frozen=True)
class ProfileEvidence:
    experiments: dict[int, Experiment]  # those whose cells are used, by id
    other_metric: list[Experiment]  # on the model and queue, but asking about another metric
    cells: list[service_bands.Cell]
    baselines: dict[tuple[int, int], RunP90s]  # (experiment, level): the baseline's run p90s
    mixes: dict[int, dict[str, float]]  # experiment: the categories of its measured prompts, {} unknown


def service_profiles_of(*, user) -> QuerySet[ServiceProfile]:
    return ServiceProfile.objects.visible_to(user).select_related("team", "owner")


def form_suggestions(*, user) -> dict[str, list[str]]:
    """The services, models, worker queues and categories of what the user may see, for the
    form's lists."""
    experiments = Experiment.objects.visible_to(user)
    uploaded = UploadedPromptSet.objects.visible_to(user).values_list("categories", flat=True)
    return {
        "services": sorted(set(Decision.objects.visible_to(user).values_list("service", flat=True))),
        "models": sorted(set(experiments.values_list("target_model", flat=True))),
        "queues": sorted(set(experiments.values_list("worker_queue", flat=True))),
        "categories": sorted(set(catalog.builtin_prompt_sets()) | {c for counts in uploaded for c in counts}),
    }


def _candidates(profile: ServiceProfile) -> list[Experiment]:
    finished = Experiment.objects.filter(
        team=profile.team_id, status=Experiment.Status.FINISHED, source=Experiment.Source.MEASURED,
        target_model=profile.target_model, worker_queue=profile.worker_queue, analysis__isnull=False,
    )  # fmt: skip
    fields = ("id", "name", "finished_at", "primary_metric", "workload_kind", "prompt_set")
    return list(finished.only(*fields).order_by("-finished_at", "-id"))


def _stored(ids: list[int]) -> dict[int, tuple[list[dict], list[dict]]]:
    """Per experiment, the primary cells and the breakdown by category its analysis stored,
    read from the analysis' JSON in PostgreSQL (the rest of the chart series stays there)."""
    series = "analysis__series"
    rows = Experiment.objects.filter(id__in=ids).values_list(
        "id", KeyTransform("cells", KeyTransform("question", series)), KeyTransform("by_category", series)
    )
    return {pk: (cells or [], by_category or []) for pk, cells, by_category in rows}


def _by_category(groups: list[dict]) -> dict[tuple[int, int], dict[str, float]]:
    """(arm, level): each category's engine-timed TPOT speedup."""
    speedups: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
    for group in groups:
        for cell in group["cells"]:
            if cell["point"] is not None:
                speedups[(cell["arm_id"], cell["level"])][group["group"]] = cell["point"]
    return speedups


def _mix(experiment: Experiment, groups: list[dict]) -> dict[str, float]:
    """The categories of the experiment's measured prompts: a built-in set is its own one;
    {} when unknown (synthetic prompts, or an uploaded set without several categories)."""
    total = sum(group["prompts"] for group in groups)
    if total:
        return {group["group"]: group["prompts"] / total for group in groups}
    return {experiment.prompt_set: 1.0} if experiment.workload_kind == Experiment.WorkloadKind.BUILTIN else {}


def _run_p90s(experiments: list[Experiment], slos: dict[str, float]) -> dict[tuple[int, int], RunP90s]:
    """(arm, level): each succeeded run's p90 of each SLO metric the profile sets."""
    columns = [P90_COLUMNS[metric] for metric in slos]
    found: dict[tuple[int, int], RunP90s] = defaultdict(lambda: defaultdict(list))
    if not columns:
        return found
    for experiment in experiments:
        rows = RunSummary.objects.succeeded_of(experiment).values_list("run__arm_id", "run__concurrency", *columns)
        for arm, level, *values in rows:
            for metric, value in zip(slos, values, strict=True):
                if value is not None:
                    found[(arm, level)][metric].append(value)
    return found


def _points(ids: list[int], metric: str) -> dict[tuple[int, int], float | None]:
    rows = SpeedupEstimate.objects.filter(experiment__in=ids, primary=True, metric=metric)
    return {(arm, level): point for arm, level, point in rows.values_list("arm_id", "concurrency", "point")}


def _cell(
    arm: Arm, cell: dict, point: float | None, p90s: RunP90s, by_category: dict[str, float]
) -> service_bands.Cell:
    return service_bands.Cell(
        experiment=arm.experiment_id, arm=arm.id, label=arm.label, method=arm.method, k=arm.num_speculative_tokens or 0,
        config=json.dumps(arm.speculative_config(), sort_keys=True), level=cell["level"],
        outcome=objective.deploy_outcome(cell), speedup=point, blocks=cell["blocks"], run_p90_ms=p90s,
        by_category=by_category,
    )  # fmt: skip


def profile_evidence(*, profile: ServiceProfile) -> ProfileEvidence:
    """The evidence of the profile's recommendation: five queries, and one per experiment for
    its runs' p90s when the profile sets SLOs."""
    candidates = _candidates(profile)
    stored = _stored([e.id for e in candidates])
    used = [e for e in candidates if e.primary_metric == profile.metric and stored[e.id][0]]
    ids = [e.id for e in used]
    arms = Arm.objects.filter(experiment__in=ids).in_bulk()
    points, p90s = _points(ids, profile.metric), _run_p90s(used, profile.slos)
    cells = []
    for experiment in used:
        question, groups = stored[experiment.id]
        by_category = _by_category(groups)
        for cell in question:
            key = (cell["arm_id"], cell["level"])
            arm = arms[cell["arm_id"]]
            cells.append(_cell(arm, cell, points.get(key), p90s.get(key, {}), by_category.get(key, {})))
    baselines = {
        (arms[arm_id].experiment_id, level): values for (arm_id, level), values in p90s.items()
        if arm_id in arms and arms[arm_id].is_baseline
    }  # fmt: skip
    return ProfileEvidence(
        experiments={e.id: e for e in used},
        other_metric=[e for e in candidates if e.primary_metric != profile.metric],
        cells=cells,
        baselines=baselines,
        mixes={e.id: _mix(e, stored[e.id][1]) for e in used},
    )
