"""Teams: who may see and write what. A team is a Django group (django.contrib.auth's Group):
experiments, uploaded prompt sets and decisions belong to one, and its members see and
review them; nobody else does, except superusers, who see everything.

The one copy of the rule is `visible_q`; the models' `visible_to` and the admin apply it.
Writes go to a team the writer belongs to (`team_for_write`). A single-team install needs
no set-up: every user joins the default team when created (migration 0013 put the users
and rows that existed before teams into it).

Staff status is left out of the rule on purpose: it is Django's "may use the admin" flag,
and the admin filters by the same rule as the pages for everyone but superusers.
"""

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, Group, User
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.db.models.signals import post_save
from django.dispatch import receiver

DEFAULT_TEAM = "everyone"


class TeamRefused(PermissionDenied):
    """A write to a team the user is not in, or no team to write to."""


def visible_teams(user: User | AnonymousUser) -> QuerySet[Group] | None:
    """The teams whose rows `user` may see; None for every team (a superuser)."""
    if not user.is_authenticated:
        return Group.objects.none()
    if user.is_superuser:
        return None
    return user.groups.all()


def visible_q(user: User | AnonymousUser, path: str = "team") -> Q:
    """The rows `user` may see, as a condition on the team at `path` ("team",
    "experiment__team", …). An empty Q for a superuser: everything."""
    visible = visible_teams(user)
    return Q() if visible is None else Q(**{f"{path}__in": visible.values("pk")})


def default_team() -> Group:
    return Group.objects.get_or_create(name=DEFAULT_TEAM)[0]


def teams_of(user: User) -> QuerySet[Group]:
    """The teams a user may write to, by name."""
    return user.groups.order_by("name")


def team_for_write(user: User, team: Group | None = None) -> Group:
    """The team a new experiment, prompt set or decision of `user` goes to: `team` if they
    are in it, else their only team. TeamRefused otherwise, with a message that names no
    team the user is not in."""
    teams = list(teams_of(user))
    if team is not None:
        if team not in teams:
            raise TeamRefused(f"You are not in the team “{team.name}”.")
        return team
    if not teams:
        raise TeamRefused("You are in no team: an administrator adds you to one (Admin → Users → Groups).")
    if len(teams) > 1:
        raise TeamRefused(f"Choose a team: you are in {', '.join(t.name for t in teams)}.")
    return teams[0]


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="experiments.teams.join_default_team")
def join_default_team(sender: type[User], instance: User, created: bool, raw: bool = False, **kwargs: Any) -> None:
    """A new user (signed up, made by createsuperuser or ./dev) joins the default team, so a
    single-team install never needs the admin; a multi-team install removes them from it."""
    if created and not raw:
        instance.groups.add(default_team())
