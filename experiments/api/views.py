"""The API's endpoints: check access → validate → call a service or a payload builder, as the
pages' views do. A token (or a logged-in session) is needed for everything but the schema."""

from typing import TYPE_CHECKING, Any, TypedDict, cast

from django.contrib.auth.decorators import login_not_required
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from experiments import submissions
from experiments.api import payloads
from experiments.api.result_serializers import ResultsSerializer
from experiments.api.serializers import (
    DetailSerializer,
    ExperimentSerializer,
    ExperimentSpecSerializer,
    ProgressSerializer,
    RequestRowSerializer,
    SpecErrorsSerializer,
    SummaryRowSerializer,
)
from experiments.api.submission import SpecInvalid, submission_from_spec
from experiments.definition import services as definition
from experiments.execution import services as execution
from experiments.models import Experiment, IllegalTransition, Submission
from experiments.results import exports, selectors

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django_stubs_ext import WithAnnotations
    from rest_framework.views import AsView, GenericView


class RowPages(PageNumberPagination):
    """Pages of rows: 100 by default, up to 1,000 with ?page_size=."""

    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class ApiView(APIView):
    """An API endpoint: its own authentication (token or session), not the pages' login redirect."""

    @classmethod
    def as_view(cls, **initkwargs: Any) -> "AsView[GenericView]":
        return login_not_required(super().as_view(**initkwargs))


def _experiment(request: Request, pk: int) -> Experiment:
    """An experiment of the user's teams (experiments/teams.py); a 404 for another team's, as on the pages."""
    experiment: Experiment = get_object_or_404(
        Experiment.objects.visible_to(request.user).select_related("owner", "analysis"), pk=pk
    )
    return experiment


class _RunCounts(TypedDict):
    """What selectors.experiment_list annotates each experiment with."""

    runs_total: int
    runs_done: int


def _list_item(experiment: "WithAnnotations[Experiment, _RunCounts]") -> dict[str, Any]:
    return {
        "id": experiment.pk, "name": experiment.name, "owner": experiment.owner.get_username(),
        "team": experiment.team.name, "status": experiment.status, "created_at": experiment.created_at,
        "runs_total": experiment.runs_total, "runs_done": experiment.runs_done,
    }  # fmt: skip


ExperimentListItem = inline_serializer(
    "ExperimentListItem",
    {
        "id": serializers.IntegerField(), "name": serializers.CharField(), "owner": serializers.CharField(),
        "team": serializers.CharField(), "status": serializers.ChoiceField(choices=Experiment.Status.choices),
        "created_at": serializers.DateTimeField(),
        "runs_total": serializers.IntegerField(), "runs_done": serializers.IntegerField(),
    },
)  # fmt: skip


class ExperimentsView(ApiView):
    @extend_schema(
        operation_id="experiments_list",
        parameters=[OpenApiParameter("status", str, enum=Experiment.Status.values)],
        responses=ExperimentListItem,
    )
    def get(self, request: Request) -> Response:
        """The experiments of your teams, newest first."""
        wanted = request.query_params.get("status", "")
        if wanted and wanted not in Experiment.Status.values:
            known = ", ".join(Experiment.Status.values)
            return Response({"detail": f"Unknown status; one of: {known}."}, status=status.HTTP_400_BAD_REQUEST)
        # experiment_list annotates the run counts; its return type does not say so.
        experiments = cast(
            "QuerySet[WithAnnotations[Experiment, _RunCounts]]",
            selectors.experiment_list(user=request.user, status=wanted),
        )
        pages = RowPages()
        page = pages.paginate_queryset(experiments, request, view=self)
        assert page is not None, "RowPages has a page size, so it always pages"
        return pages.get_paginated_response([_list_item(experiment) for experiment in page])

    @extend_schema(
        operation_id="experiments_submit",
        request=ExperimentSpecSerializer,
        parameters=[
            OpenApiParameter(
                submissions.HEADER, str, OpenApiParameter.HEADER,
                description="Optional, 1 to 64 printable ASCII characters, yours alone and for this endpoint "
                "only, kept 24 hours. A submission retried with the same key and the same body creates nothing "
                "and answers 200 with the experiment the first one created; the same key with another body is "
                "refused with 422.",
            )
        ],
        responses={
            201: ExperimentSerializer, 200: ExperimentSerializer, 400: SpecErrorsSerializer,
            404: DetailSerializer, 422: DetailSerializer,
        },
    )  # fmt: skip
    def post(self, request: Request) -> Response:
        """Submit an experiment. The spec is judged by the experiment form's own rules and
        messages; fields left out take the form's initial values."""
        key = request.headers.get(submissions.HEADER)
        if key is not None and submissions.key_problem(key):
            return Response({"detail": f"{submissions.key_problem(key)}."}, status=status.HTTP_400_BAD_REQUEST)
        try:
            submission = submission_from_spec(request.data, user=request.user)
        except SpecInvalid as invalid:
            return Response(
                {"errors": invalid.errors, "messages": invalid.messages}, status=status.HTTP_400_BAD_REQUEST
            )

        def write() -> str:
            experiment = definition.experiment_create(owner=request.user, arms=submission.arms, **submission.fields)
            return str(experiment.pk)

        if key is None:
            return Response(payloads.experiment_payload(Experiment.objects.get(pk=write())), status=201)
        try:
            stored, wrote = submissions.submission_once(
                user=request.user, kind=Submission.Kind.API, door=submissions.door_of(request), key=key,
                fingerprint=submissions.body_fingerprint(request.data), write=write,
            )  # fmt: skip
        except submissions.KeyReused:
            detail = (
                f"This {submissions.HEADER} was used before with a different request body; nothing was created. "
                "Reuse a key only to retry the same request, and send a new key with a new one."
            )
            return Response({"detail": detail}, status=status.HTTP_422_UNPROCESSABLE_ENTITY)
        return Response(_replayed(request, stored), status=status.HTTP_201_CREATED if wrote else status.HTTP_200_OK)


def _replayed(request: Request, stored: str) -> dict[str, Any]:
    """The experiment a key's first submission created, looked up again among the user's own
    teams' experiments (a 404 when it can no longer be seen, or the row holds no experiment id)."""
    if not stored.isdigit():
        raise NotFound(f"The experiment this {submissions.HEADER} created is not one you can see.")
    return payloads.experiment_payload(_experiment(request, int(stored)))


class ExperimentView(ApiView):
    @extend_schema(operation_id="experiments_read", responses=ExperimentSerializer)
    def get(self, request: Request, pk: int) -> Response:
        """One experiment: status, protocol (as a spec), arms, warnings and links."""
        return Response(payloads.experiment_payload(_experiment(request, pk)))


class ProgressView(ApiView):
    @extend_schema(operation_id="experiments_progress", responses=ProgressSerializer)
    def get(self, request: Request, pk: int) -> Response:
        """Run counts by status, and every run in the order the worker executes them."""
        return Response(payloads.progress_payload(_experiment(request, pk)))


class CancelView(ApiView):
    @extend_schema(
        operation_id="experiments_cancel",
        request=None,
        responses={200: ProgressSerializer, 403: DetailSerializer, 409: DetailSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        """Cancel a queued or running experiment (its owner or staff): completed runs are kept."""
        experiment = _experiment(request, pk)
        if request.user != experiment.owner and not request.user.is_staff:
            return Response({"detail": "Only the experiment's owner (or staff) may cancel it."}, status=403)
        try:
            execution.experiment_cancel(experiment=experiment, by=request.user)
        except IllegalTransition:
            detail = f"The experiment is {experiment.get_status_display().lower()}: nothing to cancel."
            return Response({"detail": detail}, status=status.HTTP_409_CONFLICT)
        return Response(payloads.progress_payload(experiment))


class ResultsView(ApiView):
    @extend_schema(operation_id="experiments_results", responses=ResultsSerializer)
    def get(self, request: Request, pk: int) -> Response:
        """Every number of the experiment page's results: spreads, speedups with intervals and
        outcomes, verdicts, acceptance by position, fidelity, chart series, warnings."""
        return Response(payloads.results_payload(_experiment(request, pk)))


def _rows(view: APIView, request: Request, export: exports.Export) -> Response:
    pages = RowPages()
    page = pages.paginate_queryset(export.rows, request, view=view)
    return pages.get_paginated_response(payloads.export_page(export, page))


class SummariesView(ApiView):
    @extend_schema(operation_id="experiments_summaries", responses=SummaryRowSerializer(many=True))
    def get(self, request: Request, pk: int) -> Response:
        """One row per run summary, as the summaries download gives them."""
        return _rows(self, request, exports.run_summary_export(experiment=_experiment(request, pk)))


class RequestsView(ApiView):
    @extend_schema(operation_id="experiments_requests", responses=RequestRowSerializer(many=True))
    def get(self, request: Request, pk: int) -> Response:
        """One row per measured request, as the requests download gives them, a page at a time."""
        return _rows(self, request, exports.request_export(experiment=_experiment(request, pk)))
