"""An uploaded prompt set: one version of a name, never edited (experiments/prompt_sets/)."""

from django.conf import settings
from django.db import models

from experiments.models.base import TeamQuerySet, team_field


class UploadedPromptSet(models.Model):
    """A prompt set a user uploaded (experiments/prompts/uploads.py reads the file): one version
    of a name, never edited; uploading other content under the name makes the next version."""

    class Format(models.TextChoices):
        PROMPTS = "prompts", "JSONL of prompts"
        CHAT = "chat", "JSONL of chat messages"
        SHAREGPT = "sharegpt", "ShareGPT conversations"

    name = models.SlugField(max_length=48)
    version = models.PositiveIntegerField()
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    team = team_field()
    created_at = models.DateTimeField(auto_now_add=True)
    file_name = models.CharField(max_length=255)
    format = models.CharField(max_length=16, choices=Format.choices)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveIntegerField()
    items = models.JSONField(help_text='[{"prompt", "category", "messages"?}, ...] in file order.')
    prompt_count = models.PositiveIntegerField()
    categories = models.JSONField(default=dict, blank=True, help_text="Prompts per category; {} without categories.")
    length_histogram = models.JSONField(default=list, help_text="Prompts per length bin in words (lo, hi, count).")

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name", "-version"]
        # Each team names and versions its own sets.
        constraints = [models.UniqueConstraint(fields=["team", "name", "version"], name="prompt_set_version_unique")]

    def __str__(self):
        return f"{self.name} v{self.version}"

    @property
    def has_messages(self) -> bool:
        return self.format == self.Format.CHAT

    def prompts(self) -> list[str]:
        """The requests' text in file order: what a completions request sends."""
        return [item["prompt"] for item in self.items]

    def item_categories(self) -> list[str]:
        return [item["category"] for item in self.items]
