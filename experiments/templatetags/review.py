"""Text the team wrote, shown inert: escaped, with "#12" made a link to experiment 12 (and
"decision #5" to decision 5); and the values a decision's events recorded, shown plainly."""

import json
import re

from django import template
from django.urls import reverse
from django.utils.html import escape, linebreaks
from django.utils.safestring import mark_safe

from experiments.review.forms import CommentForm
from experiments.review.selectors import decisions_citing

register = template.Library()


@register.simple_tag
def experiment_review(experiment) -> dict:
    """The review's part of the experiment page: its comments, the comment form and the
    decisions that cite it (the results' view reads none of the review)."""
    return {
        "comments": experiment.comments.select_related("author"),
        "comment_form": CommentForm(),
        "cited_by": decisions_citing(experiment_ids=[experiment.pk])[experiment.pk],
    }


# "#12" (an experiment) or "decision #5", not inside a word or an HTML entity such as &#x27;.
REFERENCE = re.compile(r"(?<![\w&])(?:(decision) )?#(\d{1,9})\b", re.IGNORECASE)


@register.filter
def with_experiment_links(text: str) -> str:
    """Plain text as paragraphs, markup escaped, #12 linked to experiment 12 and
    "decision #5" to decision 5."""

    def link(match: re.Match) -> str:
        decision, number = match.group(1), int(match.group(2))
        url = reverse("experiments:decision" if decision else "experiments:detail", args=[number])
        return f'<a href="{url}">{match.group(0)}</a>'

    return mark_safe(REFERENCE.sub(link, linebreaks(escape(text))))


@register.filter
def recorded(value) -> str:
    """A value an event kept: lists joined, mappings as JSON, nothing as a dash."""
    if value is None or value == "":
        return "–"
    if isinstance(value, list):
        return "; ".join(recorded(item) for item in value) or "–"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)
