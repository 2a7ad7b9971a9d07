"""The service profile pages: the team's profiles, a new one, one profile with its
recommendation per concurrency band, and its edit. Check access → validate → call
experiments/service_profiles/services.py or the selectors → render or redirect. A user sees and
changes their teams' profiles only: another team's profile is a 404."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from experiments import submissions
from experiments.models import ServiceProfile
from experiments.rules import service_load
from experiments.service_profiles import recommendation, selectors, services
from experiments.service_profiles.forms import ServiceProfileForm, ServiceProfileNewForm


def _get_profile(request, pk: int) -> ServiceProfile:
    try:
        return selectors.service_profiles_of(user=request.user).get(pk=pk)
    except ServiceProfile.DoesNotExist:
        raise Http404("No such service profile.") from None


def _form_page(request, form: ServiceProfileForm, suggestions: dict, profile: ServiceProfile | None = None):
    context = {"form": form, "profile": profile, **suggestions}
    return render(request, "experiments/service_profile_form.html", context, status=400 if form.is_bound else 200)


@require_GET
def service_profile_list(request):
    profiles = selectors.service_profiles_of(user=request.user)
    context = {"profiles": profiles, "several_teams": len({p.team_id for p in profiles}) > 1}
    return render(request, "experiments/service_profiles.html", context)


@require_http_methods(["GET", "POST"])
def service_profile_new(request):
    suggestions = selectors.form_suggestions(user=request.user)
    form = ServiceProfileNewForm(request.POST or None, user=request.user, categories=suggestions["categories"])
    if request.method == "POST" and form.is_valid():

        def write() -> str:
            profile = services.service_profile_create(
                owner=request.user, team=form.cleaned_data["team"], spec=form.spec()
            )
            return reverse("experiments:service_profile", args=[profile.pk])

        try:
            return submissions.redirect_once(request, write)
        except services.ServiceProfileTaken as taken:
            form.add_error("service", str(taken))
    return _form_page(request, form, suggestions)


@require_GET
def service_profile_detail(request, pk: int):
    profile = _get_profile(request, pk)
    evidence = selectors.profile_evidence(profile=profile)
    curve = service_load.daily_curve_text(profile.daily_concurrency)
    context = {"profile": profile, "curve": curve, **recommendation.page_context(profile=profile, evidence=evidence)}
    return render(request, "experiments/service_profile.html", context)


@require_http_methods(["GET", "POST"])
def service_profile_edit(request, pk: int):
    profile = _get_profile(request, pk)
    suggestions = selectors.form_suggestions(user=request.user)
    form = ServiceProfileForm(
        request.POST or None, categories=suggestions["categories"], initial=ServiceProfileForm.initial_from(profile)
    )
    if request.method == "POST" and form.is_valid():
        try:
            services.service_profile_update(profile=profile, by=request.user, spec=form.spec())
        except services.ServiceProfileTaken as taken:
            form.add_error("service", str(taken))
        else:
            messages.success(request, "Saved: the recommendation below reads the profile as it is now.")
            return redirect("experiments:service_profile", pk=profile.pk)
    return _form_page(request, form, suggestions, profile)
