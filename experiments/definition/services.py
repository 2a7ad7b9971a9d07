"""Creating an experiment: its arms, and every run queued at its place in the randomised
block schedule. The experiment is handed to its worker queue once the row commits."""

from dataclasses import dataclass, field

from django.db import transaction

from experiments import teams
from experiments.execution import blocks, dispatch
from experiments.measurement.deploy import batch_schedule
from experiments.models import Arm, Experiment


@dataclass(frozen=True)
class ArmSpec:
    method: str
    num_speculative_tokens: int | None = None
    params: dict = field(default_factory=dict)
    label: str = ""
    is_replicate: bool = False
    synthetic_sweep: tuple[float, ...] = ()
    is_calibration: bool = False


REPLICATE_LABEL = "baseline replicate (A/A)"

CALIBRATION_LABEL = "calibration: draft model alone"


def arm_default_label(spec: ArmSpec) -> str:
    if spec.is_replicate:
        return REPLICATE_LABEL
    if spec.is_calibration:
        model = spec.params["model"].rstrip("/")
        return f"{CALIBRATION_LABEL} ({model.rsplit('/', 1)[-1]})"
    if spec.method == Arm.Method.BASELINE:
        return "baseline"
    draft_tp = spec.params.get("draft_tensor_parallel_size")
    return (
        f"{Arm.Method(spec.method).label} k={spec.num_speculative_tokens}"
        + (f" draft TP {draft_tp}" if draft_tp else "")
        + (" by batch size" if batch_schedule.KEY in spec.params else "")
    )


def calibration_specs(arms: list[ArmSpec]) -> list[ArmSpec]:
    """One calibration arm per distinct draft model of the draft-model arms: a draft's step
    time does not depend on how many tokens an arm asks it for, so arms that share a draft
    share its calibration."""
    models = dict.fromkeys(spec.params["model"] for spec in arms if spec.method == Arm.Method.DRAFT_MODEL)
    return [ArmSpec(method=Arm.Method.BASELINE, params={"model": model}, is_calibration=True) for model in models]


@transaction.atomic
def experiment_create(*, owner, arms: list[ArmSpec], team=None, **fields) -> Experiment:
    """Create the experiment, its baseline (and A/A replicate) and speculative arms, and
    every run, queued, with its place in the randomised block schedule.

    It belongs to `team`, which the owner must be in; without one, to the owner's only team
    (teams.team_for_write).

    The baseline arm, the replicate when `aa_replicate` is set and the calibration arms when
    `draft_calibration` is set are added here; `arms` lists the speculative arms only. The
    experiment is dispatched to its worker queue once the transaction commits.
    """
    experiment = Experiment.objects.create(owner=owner, team=teams.team_for_write(owner, team), **fields)
    specs = [ArmSpec(method=Arm.Method.BASELINE)]
    if experiment.aa_replicate:
        specs.append(ArmSpec(method=Arm.Method.BASELINE, is_replicate=True))
    specs += list(arms)
    if experiment.draft_calibration:
        specs += calibration_specs(arms)
    for position, spec in enumerate(specs):
        Arm.objects.create(
            experiment=experiment,
            position=position,
            label=spec.label or arm_default_label(spec),
            method=spec.method,
            num_speculative_tokens=spec.num_speculative_tokens,
            params=spec.params,
            is_replicate=spec.is_replicate,
            synthetic_sweep=list(spec.synthetic_sweep),
            is_calibration=spec.is_calibration,
        )
    blocks.first_blocks_queue(experiment=experiment)
    # Redis down at this moment leaves it queued for the periodic dispatcher, not lost.
    transaction.on_commit(lambda: dispatch.experiment_dispatch(experiment=experiment))
    return experiment
