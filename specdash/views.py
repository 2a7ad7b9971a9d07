"""Error pages that say what went wrong, instead of Django's bare "Bad Request" or "403
Forbidden"; under /api/ the same answers are JSON ({"detail": …}), as the API's own are."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.defaultfilters import filesizeformat
from django.views import defaults


def _answer(request: HttpRequest, status: int, title: str, message: str) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=status)
    return render(request, "error.html", {"title": title, "message": message}, status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django answers an oversized or over-long form with a 400 it does not explain: name
    the limit (413), so that the user knows to shorten the text rather than try again."""
    if isinstance(exception, RequestDataTooBig | TooManyFieldsSent):
        message = (
            f"The request was larger than this site accepts "
            f"({filesizeformat(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)} or {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} "
            "fields). Nothing was saved. Shorten the longest text (a description, a comment) and send it again."
        )
        return _answer(request, 413, "Too much data", message)
    return _answer(request, 400, "Bad request", "The request could not be understood. Nothing was saved.")


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The reason the code gave (a service's PermissionDenied says who may do what)."""
    reason = str(exception) if exception is not None and str(exception) else "You may not do this."
    return _answer(request, 403, "Not allowed", f"{reason} Nothing was changed.")


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "There is no such endpoint or object."}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Logged for the administrators (errors.log); the page itself touches nothing that may be
    what failed (no database, no session)."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "The server failed on this request; the error was logged."}, status=500)
    return defaults.server_error(request)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Django's CSRF refusal, in words (and JSON under /api/): the page was open too long, or the
    request did not come from this site's own page."""
    message = (
        "The request did not carry this site's security token (CSRF check failed: a page kept "
        "open past a log-in, cookies blocked, or a request sent from elsewhere). Nothing was "
        "changed. Reload the page and try again."
    )
    return _answer(request, 403, "Not allowed", message)
