"""Text the team wrote, shown inert: escaped, with "#12" made a link to experiment 12; and the
values a decision's events recorded, shown plainly."""

import json
import re

from django import template
from django.urls import reverse
from django.utils.html import escape, linebreaks
from django.utils.safestring import mark_safe

register = template.Library()

# "#12" not inside a word or an HTML entity such as &#x27;.
EXPERIMENT_REFERENCE = re.compile(r"(?<![\w&])#(\d{1,9})\b")


@register.filter
def with_experiment_links(text: str) -> str:
    """Plain text as paragraphs, markup escaped, #12 linked to experiment 12."""

    def link(match: re.Match) -> str:
        url = reverse("experiments:detail", args=[int(match.group(1))])
        return f'<a href="{url}">#{match.group(1)}</a>'

    return mark_safe(EXPERIMENT_REFERENCE.sub(link, linebreaks(escape(text))))


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
