from django.contrib.auth.decorators import login_not_required
from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from experiments.api import token_views, views

app_name = "api"

urlpatterns = [
    path("token/", token_views.api_token, name="token"),
    path("token/new/", token_views.api_token_rotate, name="token_rotate"),
    path("schema/", login_not_required(SpectacularAPIView.as_view()), name="schema"),
    path("v1/experiments/", views.ExperimentsView.as_view(), name="experiments"),
    path("v1/experiments/<int:pk>/", views.ExperimentView.as_view(), name="experiment-detail"),
    path("v1/experiments/<int:pk>/progress/", views.ProgressView.as_view(), name="experiment-progress"),
    path("v1/experiments/<int:pk>/cancel/", views.CancelView.as_view(), name="experiment-cancel"),
    path("v1/experiments/<int:pk>/results/", views.ResultsView.as_view(), name="experiment-results"),
    path("v1/experiments/<int:pk>/summaries/", views.SummariesView.as_view(), name="experiment-summaries"),
    path("v1/experiments/<int:pk>/requests/", views.RequestsView.as_view(), name="experiment-requests"),
]
