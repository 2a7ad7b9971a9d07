"""specdash tables: what an experiment asks for (definition, arm, prompt_set), how its runs went
(execution) and on which workers its blocks ran (fleet), what they measured (analysis), what
the team made of it (review), what it states about a service (service_profile), and the keys
that store a write once (submission), on the team ownership of base. One app label,
"experiments": every name is re-exported here, so `from experiments.models import X` works
whichever module defines X, and the migrations do not see the split."""

from experiments.models.analysis import ExperimentAnalysis, SpeedupEstimate
from experiments.models.arm import Arm, ArmQuerySet
from experiments.models.base import IllegalTransition, TeamQuerySet, team_field
from experiments.models.definition import MAX_TENSOR_PARALLEL_SIZE, Experiment, ExperimentQuerySet
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
from experiments.models.fleet import Block, BlockQuerySet, FleetWorker
from experiments.models.prompt_set import UploadedPromptSet
from experiments.models.review import Comment, Decision, DecisionEvent, DecisionEvidence, HistoryVisit
from experiments.models.service_profile import ServiceProfile
from experiments.models.submission import Submission

__all__ = [
    "MAX_TENSOR_PARALLEL_SIZE",
    "Arm",
    "ArmQuerySet",
    "Block",
    "BlockQuerySet",
    "Comment",
    "Decision",
    "DecisionEvent",
    "DecisionEvidence",
    "EnvironmentSnapshot",
    "Experiment",
    "ExperimentAnalysis",
    "ExperimentQuerySet",
    "FleetWorker",
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
