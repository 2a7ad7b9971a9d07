"""{% submission_key %}: the hidden one-time key of a form that writes (experiments/submissions.py)."""

from django import template
from django.utils.html import format_html

from experiments import submissions

register = template.Library()


@register.simple_tag
def submission_key():
    return format_html('<input type="hidden" name="{}" value="{}">', submissions.FIELD, submissions.new_key())
