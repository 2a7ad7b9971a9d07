"""Writes that store once, whatever is sent twice.

A form our pages render carries a fresh key (the `submission_key` template tag); an API
client may send one as the Idempotency-Key header. The first request with a key claims it
(a row unique per user and key) in the same transaction as its write and records where the
result is; a second request with that key, a double click or a retry after a timeout, writes
nothing and is pointed at the first's result. Concurrent twins are ordered by the unique
index: the second waits for the first to commit, then finds its row. A write that fails
rolls its claim back with it, so the key can be used again.

Why keys and not the CSRF token: Django's CSRF token is the same for every form of a session,
so it cannot tell a second click from the next experiment; a key is one per rendered form.
"""

import secrets
from collections.abc import Callable

from django.contrib import messages
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import redirect

from experiments.models import Submission

FIELD = "submission_key"
HEADER = "Idempotency-Key"
MAX_KEY_CHARS = Submission.KEY_CHARS


def new_key() -> str:
    return secrets.token_urlsafe(24)


def key_problem(key: str) -> str | None:
    """Why a key cannot be used, or None."""
    if not key or len(key) > MAX_KEY_CHARS or not key.isascii() or not key.isprintable():
        return f"an {HEADER} is 1 to {MAX_KEY_CHARS} printable ASCII characters"
    return None


def submission_once(*, user, key: str, write: Callable[[], str]) -> tuple[str, bool]:
    """Run `write` (it stores, and returns where the result is) unless `user` used `key`
    before; return (the location, whether this call wrote)."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                claim = Submission.objects.create(user=user, key=key)
        except IntegrityError:
            return Submission.objects.get(user=user, key=key).location, False
        claim.location = write()
        claim.save(update_fields=["location"])
    return claim.location, True


def redirect_once(request: HttpRequest, write: Callable[[], str]) -> HttpResponseRedirect:
    """A view's answer to a valid POST: `write` stores and returns where to go; posted again
    with the form's key, nothing is written and the answer goes to the first result. A POST
    without a key (a script, a page from before keys) is written as it comes."""
    key = request.POST.get(FIELD, "")
    if key_problem(key):
        return redirect(write())
    location, wrote = submission_once(user=request.user, key=key, write=write)
    if not wrote:
        messages.info(request, "This form was sent twice (a double click or a retry); it was stored once, here.")
    return redirect(location)
