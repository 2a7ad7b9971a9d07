"""What every model module builds on: team ownership (TeamQuerySet, team_field) and the
IllegalTransition that each state machine raises. It imports no other model module."""

from typing import Self

from django.contrib.auth.models import Group
from django.db import models

from experiments.teams import visible_q


class IllegalTransition(Exception):
    """A status change that the state machine does not allow."""


class TeamQuerySet(models.QuerySet):
    """Rows that belong to a team (experiments/teams.py)."""

    def visible_to(self, user) -> Self:
        """What `user` may see: their teams' rows (every row for a superuser)."""
        return self.filter(visible_q(user))


def team_field() -> models.ForeignKey:
    return models.ForeignKey(Group, on_delete=models.PROTECT, related_name="+", help_text="Its members see it.")
