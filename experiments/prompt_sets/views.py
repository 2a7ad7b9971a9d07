"""Uploaded prompt sets: the list with the upload form, and one version's page. A user sees
their teams' sets only; another team's set is a 404."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from experiments import submissions
from experiments.models import UploadedPromptSet
from experiments.prompt_sets import services
from experiments.prompt_sets.forms import PromptSetUploadForm


@require_http_methods(["GET", "POST"])
def prompt_set_list(request):
    form = PromptSetUploadForm(request.POST or None, request.FILES or None, user=request.user)
    if request.method == "POST" and form.is_valid():

        def write() -> str:
            uploaded = services.prompt_set_upload(
                owner=request.user, team=form.cleaned_data["team"], name=form.cleaned_data["name"],
                file_name=form.upload.name, size_bytes=form.upload.size, parsed=form.cleaned_data["file"],
            )  # fmt: skip
            messages.success(
                request, f"Prompt set {uploaded}: {uploaded.prompt_count} prompts, sha256 {uploaded.sha256}."
            )
            return reverse("experiments:prompt_set", args=[uploaded.pk])

        return submissions.redirect_once(request, write)
    context = {"form": form, "prompt_sets": services.prompt_sets_latest(user=request.user)}
    return render(request, "experiments/prompt_sets.html", context, status=400 if form.errors else 200)


@require_GET
def prompt_set_detail(request, pk: int):
    visible = UploadedPromptSet.objects.visible_to(request.user).select_related("owner", "team")
    prompt_set = get_object_or_404(visible, pk=pk)
    context = {
        "prompt_set": prompt_set,
        "versions": services.prompt_set_versions(prompt_set=prompt_set),
        "most": max((b["count"] for b in prompt_set.length_histogram), default=1),
        "sample": prompt_set.items[:5],
        "token_lengths": services.prompt_set_token_lengths(prompt_set=prompt_set, user=request.user),
    }
    return render(request, "experiments/prompt_set.html", context)
