"""What the team tests build: members, their clients, proposals and prompt sets."""

import json

from django.contrib.auth.models import Group
from django.test import Client

from experiments.decisions import services as decisions
from experiments.decisions.services import DecisionSpec
from experiments.models import Decision, UploadedPromptSet
from experiments.prompt_sets.services import prompt_set_upload
from experiments.prompts.uploads import prompt_file_read
from tests.factories import UserFactory


def member(username: str, *groups: Group, **fields):
    """A user in exactly these teams (a new user also joins the default team)."""
    user = UserFactory(username=username, **fields)
    user.groups.set(groups)
    return user


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def proposal(author, experiment) -> Decision:
    spec = DecisionSpec(
        service="red-chat", kind=Decision.Kind.NEEDS_MORE_DATA, arm=None, max_concurrency=None, metric="tpot",
        rationale=f"More blocks on #{experiment.pk}.", evidence=[experiment],
    )  # fmt: skip
    return decisions.decision_propose(by=author, spec=spec)


def jsonl(n=12) -> bytes:
    return "\n".join(json.dumps({"prompt": f"red prompt {i} " + "w " * i}) for i in range(n)).encode()


def prompt_set(owner, team=None, name="red-traffic") -> UploadedPromptSet:
    data = jsonl()
    parsed = prompt_file_read("t.jsonl", data)
    return prompt_set_upload(
        owner=owner, team=team, name=name, file_name="t.jsonl", size_bytes=len(data), parsed=parsed
    )
