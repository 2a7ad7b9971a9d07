"""Writes that store once, whatever is sent twice.

A form our pages render carries a fresh key (the `submission_key` template tag); an API
client may send one as the Idempotency-Key header. The first request with a key claims it
(a row unique per user, kind, door and key) in the same transaction as its write, records a
fingerprint of what was sent and where the result is; a second request with that key and the
same content, a double click or a retry after a timeout, writes nothing and is pointed at the
first's result. The same key with other content is refused (as the IETF idempotency-key draft
and Stripe do): it is a mistake, not a retry. Concurrent twins are ordered by the unique index:
the second waits for the first to commit, then finds its row. A write that fails rolls its
claim back with it, so the key can be used again. Keys are forgotten after `LIFETIME`.

A key is looked up only among its own user's keys of the same kind (a page's form or the
API) sent to the same door (the path): a key taken from one form cannot reach what another
form, another endpoint or another user created. What a replay points at is authorised again
by whoever answers it (the page's view, or the API's lookup among the user's experiments).

Why keys and not the CSRF token: Django's CSRF token is the same for every form of a session,
so it cannot tell a second click from the next experiment; a key is one per rendered form.
"""

import hashlib
import json
import secrets
from collections.abc import Callable
from datetime import timedelta

from django.contrib import messages
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from experiments.models import Submission

FIELD = "submission_key"
HEADER = "Idempotency-Key"
MAX_KEY_CHARS = Submission.KEY_CHARS
# Long enough for any retry a person or a client makes; short enough that the table stays small.
LIFETIME = timedelta(hours=24)
# What a form posts beside its own fields, and so is no part of what it sends.
_NOT_CONTENT = {FIELD, "csrfmiddlewaretoken"}


class KeyReused(Exception):
    """The key was claimed before with other content: a new request under an old key."""


def new_key() -> str:
    return secrets.token_urlsafe(24)


def key_problem(key: str) -> str | None:
    """Why a key cannot be used, or None."""
    if not key or len(key) > MAX_KEY_CHARS or not key.isascii() or not key.isprintable():
        return f"an {HEADER} is 1 to {MAX_KEY_CHARS} printable ASCII characters"
    return None


def door_of(request: HttpRequest) -> str:
    """The door a key is scoped to: the path it was sent to (hashed when longer than a row holds)."""
    path = request.path
    if len(path) <= Submission.DOOR_CHARS:
        return path
    return "sha256:" + hashlib.sha256(path.encode()).hexdigest()


def body_fingerprint(data: object) -> str:
    """A JSON body's fingerprint: the same for the same values, however they were spaced or ordered."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def form_fingerprint(request: HttpRequest) -> str:
    """A posted form's fingerprint: its fields (the key and the CSRF token aside) and the
    content of its files."""
    digest = hashlib.sha256()
    for name in sorted(set(request.POST) - _NOT_CONTENT):
        digest.update(json.dumps([name, request.POST.getlist(name)], ensure_ascii=False).encode())
    for name in sorted(request.FILES):
        for upload in request.FILES.getlist(name):
            digest.update(json.dumps([name, upload.name, upload.size]).encode())
            for chunk in upload.chunks():
                digest.update(chunk)
    return digest.hexdigest()


def submission_once(
    *, user, kind: str, door: str, key: str, fingerprint: str, write: Callable[[], str]
) -> tuple[str, bool]:
    """Run `write` (it stores, and returns where the result is) unless `user` sent `key` to
    `door` before; return (the location, whether this call wrote). Raise KeyReused when the
    key was sent there before with another fingerprint."""
    with transaction.atomic():
        Submission.objects.filter(user=user, created_at__lt=timezone.now() - LIFETIME).delete()
        try:
            with transaction.atomic():
                claim = Submission.objects.create(user=user, kind=kind, door=door, key=key, fingerprint=fingerprint)
        except IntegrityError:
            first = Submission.objects.get(user=user, kind=kind, door=door, key=key)
            if first.fingerprint != fingerprint:
                raise KeyReused(key) from None
            return first.location, False
        claim.location = write()
        claim.save(update_fields=["location"])
    return claim.location, True


def redirect_once(request: HttpRequest, write: Callable[[], str]) -> HttpResponse:
    """A view's answer to a valid POST: `write` stores and returns where to go; posted again
    with the form's key and the same values, nothing is written and the answer goes to the first
    result (whose page checks again who may see it). The key with other values is a 409 that
    stores nothing. A POST without a key (a script, a page from before keys) is written as it comes."""
    key = request.POST.get(FIELD, "")
    if key_problem(key):
        return redirect(write())
    try:
        location, wrote = submission_once(
            user=request.user, kind=Submission.Kind.FORM, door=door_of(request), key=key,
            fingerprint=form_fingerprint(request), write=write,
        )  # fmt: skip
    except KeyReused:
        message = (
            "This form was sent before with other values (a page used again after its first "
            "submission); nothing was stored this time. Open the form again to send a new one."
        )
        return render(request, "error.html", {"title": "Already sent", "message": message}, status=409)
    if not wrote:
        messages.info(request, "This form was sent twice (a double click or a retry); it was stored once, here.")
    return redirect(location)
