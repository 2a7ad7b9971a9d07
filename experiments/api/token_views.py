"""The page where a logged-in user sees and renews the token the API and the CLI need."""

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from experiments.api import auth_tokens


def _user(request: HttpRequest) -> User:
    """The logged-in user: LoginRequiredMiddleware lets no one else reach these pages."""
    assert isinstance(request.user, User), "only a logged-in user reaches the token pages"
    return request.user


@require_GET
@never_cache  # a secret: no browser or proxy may keep the page (Cache-Control: no-store)
def api_token(request: HttpRequest) -> HttpResponse:
    context = {"token": auth_tokens.api_token_of(user=_user(request))}
    return render(request, "experiments/api_token.html", context)


@require_POST
def api_token_rotate(request: HttpRequest) -> HttpResponseRedirect:
    auth_tokens.api_token_rotate(user=_user(request))
    return redirect("api:token")
