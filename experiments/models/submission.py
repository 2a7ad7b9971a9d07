"""The key that makes a page's or API client's write, in any domain, store once
(experiments/submissions.py)."""

from django.conf import settings
from django.db import models


class Submission(models.Model):
    """A write that a user's page or API client sent, under the key it carried: a form posted
    twice (a double click, a browser's retry) or an API call retried with the same
    Idempotency-Key stores once, and the second answer points at the first's result
    (experiments/submissions.py). A key belongs to one user, one kind and one door (the path it
    was sent to), and remembers a fingerprint of what was sent with it."""

    KEY_CHARS = 64
    DOOR_CHARS = 200

    class Kind(models.TextChoices):
        FORM = "form", "a page's one-time form key"
        API = "api", "an API client's Idempotency-Key"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=4, choices=Kind.choices, default=Kind.FORM)
    door = models.CharField(max_length=DOOR_CHARS, default="", help_text="The path the key was sent to.")
    key = models.CharField(max_length=KEY_CHARS)
    fingerprint = models.CharField(max_length=64, default="", help_text="sha256 of what was sent with the key.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    location = models.CharField(max_length=500, blank=True, help_text="Where the first submission's result is.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "kind", "door", "key"], name="submission_user_door_key_unique")
        ]

    def __str__(self):
        return f"{self.kind} key {self.key} of {self.user} at {self.door}"
