"""specdash tables: what an experiment asks for (definition), how its runs went (execution),
what they measured (analysis), what the team made of it (review) and what it states about a
service (service_profile). One app label, "experiments": every name is re-exported here, so
`from experiments.models import X` works whichever module defines X, and the migrations do
not see the split."""

from experiments.models.analysis import ExperimentAnalysis, SpeedupEstimate
from experiments.models.definition import (
    MAX_TENSOR_PARALLEL_SIZE,
    Arm,
    ArmQuerySet,
    Experiment,
    ExperimentQuerySet,
    IllegalTransition,
    Submission,
    TeamQuerySet,
    UploadedPromptSet,
    team_field,
)
from experiments.models.execution import (
    EnvironmentSnapshot,
    ProfiledInterval,
    RequestRecord,
    RequestRecordQuerySet,
    Run,
    RunQuerySet,
    RunSummary,
    RunSummaryQuerySet,
)
from experiments.models.review import Comment, Decision, DecisionEvent, DecisionEvidence, HistoryVisit
from experiments.models.service_profile import ServiceProfile

__all__ = [
    "MAX_TENSOR_PARALLEL_SIZE",
    "Arm",
    "ArmQuerySet",
    "Comment",
    "Decision",
    "DecisionEvent",
    "DecisionEvidence",
    "EnvironmentSnapshot",
    "Experiment",
    "ExperimentAnalysis",
    "ExperimentQuerySet",
    "HistoryVisit",
    "IllegalTransition",
    "ProfiledInterval",
    "RequestRecord",
    "RequestRecordQuerySet",
    "Run",
    "RunQuerySet",
    "RunSummary",
    "RunSummaryQuerySet",
    "ServiceProfile",
    "SpeedupEstimate",
    "Submission",
    "TeamQuerySet",
    "UploadedPromptSet",
    "team_field",
]
