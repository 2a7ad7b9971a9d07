"""Service profiles: storing what a team states about a service, new or changed. Every member
of the profile's team may change it; a second profile for one service in one team is refused."""

import dataclasses
from dataclasses import dataclass

from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction

from experiments import teams
from experiments.models import ServiceProfile


class ServiceProfileTaken(Exception):
    """The team already has a profile for this service."""


@dataclass(frozen=True)
class ServiceProfileSpec:
    """A profile's content, named as ServiceProfile's fields: a range (low, high) with an empty
    curve, or a curve of 24 hours with no range."""

    service: str
    target_model: str
    worker_queue: str
    metric: str
    concurrency_low: int | None
    concurrency_high: int | None
    daily_concurrency: list[int]
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    slo_e2e_ms: float | None
    category_mix: dict[str, float]


def _saved(profile: ServiceProfile) -> ServiceProfile:
    try:
        with transaction.atomic():
            profile.save()
    except IntegrityError:
        raise ServiceProfileTaken(f"The team already has a profile for the service “{profile.service}”.") from None
    return profile


def service_profile_create(*, owner, spec: ServiceProfileSpec, team: Group | None = None) -> ServiceProfile:
    """A profile in `team` (or the owner's only team)."""
    return _saved(ServiceProfile(owner=owner, team=teams.team_for_write(owner, team), **dataclasses.asdict(spec)))


def service_profile_update(*, profile: ServiceProfile, by, spec: ServiceProfileSpec) -> ServiceProfile:
    """The profile with the new content; `by` must be in its team (a superuser outside it may
    read it, not change it)."""
    teams.team_for_write(by, profile.team)
    for name, value in dataclasses.asdict(spec).items():
        setattr(profile, name, value)
    return _saved(profile)
