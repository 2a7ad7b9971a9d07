"""The review's own writes: a comment on an experiment (the decisions' writes are in
experiments/decisions/services.py)."""

from experiments.models import Comment, Experiment


def comment_add(*, experiment: Experiment, author, body: str) -> Comment:
    """A comment is kept as written: there is no edit and no delete."""
    return Comment.objects.create(experiment=experiment, author=author, body=body)
