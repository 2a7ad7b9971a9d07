from django.urls import path, re_path

from experiments.definition import views as definition_views
from experiments.imports import views as import_views
from experiments.prompt_sets import views as prompt_set_views
from experiments.results import views as results_views
from experiments.review import decision_views
from experiments.review import views as review_views
from experiments.service_profiles import views as service_profile_views

app_name = "experiments"

urlpatterns = [
    path("", review_views.experiment_list, name="list"),
    path("experiments/new/", definition_views.experiment_create, name="create"),
    path("experiments/new/estimate/", definition_views.experiment_estimate, name="estimate"),
    path("experiments/import/", import_views.experiment_import, name="import"),
    path("prompt-sets/", prompt_set_views.prompt_set_list, name="prompt_sets"),
    path("prompt-sets/<int:pk>/", prompt_set_views.prompt_set_detail, name="prompt_set"),
    path("compare/", review_views.experiment_compare, name="compare"),
    path("experiments/<int:pk>/", results_views.experiment_detail, name="detail"),
    path("experiments/<int:pk>/progress/", results_views.experiment_progress, name="progress"),
    path("experiments/<int:pk>/rerun/", definition_views.experiment_rerun, name="rerun"),
    path("experiments/<int:pk>/clone/", definition_views.experiment_clone, name="clone"),
    path("experiments/<int:pk>/cancel/", definition_views.experiment_cancel, name="cancel"),
    path("experiments/<int:pk>/budget/", definition_views.experiment_budget, name="budget"),
    path("experiments/<int:pk>/comments/", review_views.comment_add, name="comment"),
    path("decisions/", decision_views.decision_list, name="decisions"),
    path("decisions/new/", decision_views.decision_new, name="decision_new"),
    path("decisions/<int:pk>/", decision_views.decision_detail, name="decision"),
    path("decisions/<int:pk>/edit/", decision_views.decision_edit, name="decision_edit"),
    path("decisions/<int:pk>/guardrails.yaml", decision_views.decision_guardrails, name="decision_guardrails"),
    path("service-profiles/", service_profile_views.service_profile_list, name="service_profiles"),
    path("service-profiles/new/", service_profile_views.service_profile_new, name="service_profile_new"),
    path("service-profiles/<int:pk>/", service_profile_views.service_profile_detail, name="service_profile"),
    path("service-profiles/<int:pk>/edit/", service_profile_views.service_profile_edit, name="service_profile_edit"),
    re_path(
        r"^decisions/(?P<pk>[0-9]+)/(?P<action>approve|reject|withdraw|dismiss-flag)/$",
        decision_views.decision_act,
        name="decision_act",
    ),
    path(
        "experiments/<int:pk>/download/summaries.csv",
        results_views.experiment_download,
        {"table": "summaries", "fmt": "csv"},
        name="summaries_csv",
    ),
    path(
        "experiments/<int:pk>/download/summaries.json",
        results_views.experiment_download,
        {"table": "summaries", "fmt": "json"},
        name="summaries_json",
    ),
    path(
        "experiments/<int:pk>/download/requests.csv",
        results_views.experiment_download,
        {"table": "requests", "fmt": "csv"},
        name="requests_csv",
    ),
    path(
        "experiments/<int:pk>/download/requests.json",
        results_views.experiment_download,
        {"table": "requests", "fmt": "json"},
        name="requests_json",
    ),
]
