"""Integration-test helpers: a small protocol on the demo target, submitted through the API
with a user's token (tests/integration/test_multi_worker.py waits for the workers to end it)."""

from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

# One n-gram arm, one block at concurrency 1, short outputs: a few CPU minutes.
SMALL_SPEC = {
    "dtype": "float32", "warmup_requests": 1, "max_tokens": 16, "concurrency_levels": [1], "repetitions": 1,
    "temperature": 0,
    "arms": [{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 3}],
}  # fmt: skip


def token_client(user) -> Client:
    return Client(headers={"Authorization": f"Token {Token.objects.get_or_create(user=user)[0].key}"})


def submit_through_api(user, **spec) -> int:
    """Submit SMALL_SPEC with `spec` laid over it; the new experiment's id."""
    response = token_client(user).post(reverse("api:experiments"), SMALL_SPEC | spec, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["id"]
