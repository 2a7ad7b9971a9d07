"""The page where a logged-in user sees and renews the token the API and the CLI need."""

from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from experiments.api import auth_tokens


@require_GET
@never_cache  # a secret: no browser or proxy may keep the page (Cache-Control: no-store)
def api_token(request):
    context = {"token": auth_tokens.api_token_of(user=request.user)}
    return render(request, "experiments/api_token.html", context)


@require_POST
def api_token_rotate(request):
    auth_tokens.api_token_rotate(user=request.user)
    return redirect("api:token")
