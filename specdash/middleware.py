from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import resolve_url


class HtmxLoginRedirectMiddleware:
    """An htmx request (the progress poll) whose session has expired: tell htmx to load
    the login page as a whole page, instead of letting it swap the login form into the
    fragment it was refreshing."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        login_url = resolve_url(settings.LOGIN_URL)
        location = response.get("Location", "")
        if request.headers.get("HX-Request") and response.status_code == 302 and location.startswith(login_url):
            redirect = HttpResponse(status=204)
            redirect["HX-Redirect"] = location
            return redirect
        return response
