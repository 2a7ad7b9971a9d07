from django.urls import path

from experiments import views

app_name = "experiments"

urlpatterns = [
    path("", views.experiment_list, name="list"),
    path("experiments/new/", views.experiment_create, name="create"),
    path("experiments/<int:pk>/", views.experiment_detail, name="detail"),
    path("experiments/<int:pk>/progress/", views.experiment_progress, name="progress"),
]
