"""Per-user API tokens (Django REST framework's authtoken table: one token per user)."""

from django.contrib.auth.models import User
from django.db import transaction
from rest_framework.authtoken.models import Token


def api_token_of(*, user: User) -> Token | None:
    return Token.objects.filter(user=user).first()


@transaction.atomic
def api_token_rotate(*, user: User) -> Token:
    """A new token for the user; the old one stops working at once."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)
