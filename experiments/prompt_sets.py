"""Uploaded prompt sets: storing a version (the one write) and what the pages and the
experiment form read. Files are read and checked by experiments/prompt_uploads.py."""

from django.db import transaction
from django.db.models import QuerySet

from experiments import teams
from experiments.models import UploadedPromptSet
from experiments.prompt_uploads import PromptFile


@transaction.atomic
def prompt_set_upload(
    *, owner, name: str, file_name: str, size_bytes: int, parsed: PromptFile, team=None
) -> UploadedPromptSet:
    """Store the file as the next version of `name` in the team (`team`, or the owner's only
    one); the latest version itself when its content is the same (same hash), so that
    uploading a file twice makes no second version."""
    team = teams.team_for_write(owner, team)
    versions = UploadedPromptSet.objects.select_for_update().filter(team=team, name=name)
    latest = versions.order_by("-version").first()
    if latest is not None and latest.sha256 == parsed.sha256:
        return latest
    return UploadedPromptSet.objects.create(
        name=name,
        version=(latest.version + 1) if latest else 1,
        owner=owner,
        team=team,
        file_name=file_name[:255],
        format=parsed.format,
        sha256=parsed.sha256,
        size_bytes=size_bytes,
        items=[item.as_json() for item in parsed.items],
        prompt_count=len(parsed.items),
        categories=parsed.categories,
        length_histogram=parsed.length_histogram(),
    )


def prompt_sets_latest(*, user) -> QuerySet[UploadedPromptSet]:
    """The newest version of every name of the user's teams, by name (PostgreSQL's DISTINCT ON)."""
    latest = UploadedPromptSet.objects.visible_to(user).order_by("name", "team_id", "-version")
    return latest.distinct("name", "team_id").defer("items").select_related("owner", "team")


def prompt_set_versions(*, prompt_set: UploadedPromptSet) -> QuerySet[UploadedPromptSet]:
    """Every version of the set's name in its team, newest first."""
    versions = UploadedPromptSet.objects.filter(team=prompt_set.team_id, name=prompt_set.name)
    return versions.defer("items").select_related("owner").order_by("-version")
