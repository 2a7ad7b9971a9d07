"""The page that imports `vllm bench serve` result files as a read-only experiment."""

from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from experiments import submissions
from experiments.imports import bench_files, services
from experiments.imports.forms import BenchImportForm


@require_http_methods(["GET", "POST"])
def experiment_import(request):
    form = BenchImportForm(request.POST or None, request.FILES or None, user=request.user)
    if request.method == "POST" and form.is_valid():

        def write() -> str:
            experiment = services.experiment_import(
                owner=request.user, team=form.cleaned_data["team"], name=form.cleaned_data["name"],
                files=form.cleaned_data["files"],
            )  # fmt: skip
            messages.success(
                request, f"Imported {len(form.cleaned_data['files'])} result files as experiment #{experiment.pk}."
            )
            return reverse("experiments:detail", args=[experiment.pk])

        return submissions.redirect_once(request, write)
    context = {"form": form, "lacks": bench_files.WHAT_AN_IMPORT_LACKS}
    return render(request, "experiments/import.html", context, status=400 if form.errors else 200)
