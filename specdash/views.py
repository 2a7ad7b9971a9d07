"""Error pages that say what went wrong, instead of Django's bare "Bad Request"."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.shortcuts import render
from django.template.defaultfilters import filesizeformat


def bad_request(request, exception=None):
    """Django answers an oversized or over-long form with a 400 it does not explain: name
    the limit (413), so that the user knows to shorten the text rather than try again."""
    if isinstance(exception, RequestDataTooBig | TooManyFieldsSent):
        context = {
            "title": "Too much data",
            "message": f"The request was larger than this site accepts "
            f"({filesizeformat(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)} or {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} "
            "fields). Nothing was saved. Shorten the longest text (a description, a comment) and send it again.",
        }
        return render(request, "error.html", context, status=413)
    context = {"title": "Bad request", "message": "The request could not be understood. Nothing was saved."}
    return render(request, "error.html", context, status=400)
