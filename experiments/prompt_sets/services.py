"""Uploaded prompt sets: storing a version (the one write) and what the pages and the
experiment form read. Files are read and checked by experiments/prompts/uploads.py."""

import json
from collections import Counter, defaultdict
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet

from experiments import teams
from experiments.analysis.breakdowns import bucket_order, length_bucket
from experiments.models import Experiment, RequestRecord, Run, UploadedPromptSet
from experiments.prompts import catalog
from experiments.prompts.uploads import PromptFile, prompt_file_read


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


BUILTIN_SETS = ("code_edit", "chat", "summarise")


def prompt_set_from_builtin(*, owner, name: str, count: int) -> UploadedPromptSet:
    """An uploaded set of `count` distinct prompts made from the built-in sets' (code edits, chat
    turns, summaries, in turn; past their number, each again with "Request n:" in front): enough
    for concurrency levels one built-in set cannot hold (each holds about 40, and a run sends none
    twice), stored as any upload is."""
    base = [prompt for set_name in BUILTIN_SETS for prompt in catalog.get_prompt_set(set_name).prompts]
    prompts = [base[i] if i < len(base) else f"Request {i // len(base)}: {base[i % len(base)]}" for i in range(count)]
    data = "\n".join(json.dumps({"prompt": prompt}) for prompt in prompts).encode()
    parsed = prompt_file_read(f"{name}.jsonl", data)
    return prompt_set_upload(owner=owner, name=name, file_name=f"{name}.jsonl", size_bytes=len(data), parsed=parsed)


def prompt_sets_latest(*, user) -> QuerySet[UploadedPromptSet]:
    """The newest version of every name of the user's teams, by name (PostgreSQL's DISTINCT ON)."""
    latest = UploadedPromptSet.objects.visible_to(user).order_by("name", "team_id", "-version")
    return latest.distinct("name", "team_id").defer("items").select_related("owner", "team")


def prompt_set_versions(*, prompt_set: UploadedPromptSet) -> QuerySet[UploadedPromptSet]:
    """Every version of the set's name in its team, newest first."""
    versions = UploadedPromptSet.objects.filter(team=prompt_set.team_id, name=prompt_set.name)
    return versions.defer("items").select_related("owner").order_by("-version")


@dataclass(frozen=True)
class TokenLengths:
    """The set's prompts by length in tokens as one target's server counted them."""

    model: str
    endpoint: str
    prompts: int  # distinct prompts of the set that were measured on this model and endpoint
    buckets: list[tuple[str, int]]  # (input-length bucket, prompts), shortest first


def prompt_set_token_lengths(*, prompt_set: UploadedPromptSet, user) -> list[TokenLengths]:
    """Token lengths of the set's prompts from the requests recorded on it: the input tokens
    each successful request's server counted (the chat endpoint counts the chat template's
    tokens too), per target model and endpoint, over the experiments `user` may see. Only
    prompts that were measured have a token length; the page says how many."""
    experiments = {
        experiment.pk: experiment
        for experiment in Experiment.objects.visible_to(user)
        .filter(uploaded_prompt_set=prompt_set)
        .only("pk", "target_model", "endpoint", "input_lengths")
    }
    rows = (
        RequestRecord.objects.filter(run__experiment__in=list(experiments), run__status=Run.Status.SUCCEEDED, error="")
        .values_list("run__experiment_id", "prompt_index", "input_tokens")
        .distinct()
    )
    tokens: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)
    selections: dict[int, list[int]] = {}
    for experiment_id, prompt, count in rows:
        experiment = experiments[experiment_id]
        if experiment_id not in selections:
            selections[experiment_id] = catalog.uploaded_selection(prompt_set, experiment.input_lengths)
        tokens[(experiment.target_model, experiment.endpoint)][selections[experiment_id][prompt]] = count
    result = []
    for (model, endpoint), by_item in sorted(tokens.items()):
        buckets = Counter(length_bucket(count) for count in by_item.values())
        ordered = sorted(buckets.items(), key=lambda pair: bucket_order(pair[0]))
        result.append(TokenLengths(model, endpoint, len(by_item), ordered))
    return result
