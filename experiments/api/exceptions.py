"""The API's answer to an exception a view raised: DRF's, except that nothing in it comes from
the exception's arguments where those describe the server. Django's Http404 from a URL lookup
carries the URL patterns it tried (with the modules' file paths), which DRF would put in the
body; a 404 here says only that there is no such endpoint or object."""

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

NOT_FOUND = "There is no such endpoint or object."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(NOT_FOUND)
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    return drf_exception_handler(exc, context)
