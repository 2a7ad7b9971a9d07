"""Table cells of the comparison page: one column per arm, in the results block's cell markup
(the shown figure, and the exact value that sorting and "Copy" use)."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from experiments.results.block import Spread
from experiments.templatetags.results import interval_tds, spread_tds

register = template.Library()

NOT_MEASURED = Spread(None, None, None)


@register.simple_tag
def speedup_tds(estimates):
    """Per arm: its speedup with the 95% interval and the verdict word, or a dash."""
    return interval_tds(*estimates)


@register.simple_tag
def absolute_tds(spreads, decimals=1):
    """Per arm: the mean over its runs with min–max under it, or a dash."""
    return mark_safe("".join(spread_tds({"value": s or NOT_MEASURED}, "value", decimals=decimals) for s in spreads))


@register.simple_tag
def line_sample(colour, dash):
    """A short stroke in the arm's colour and its experiment's dash pattern, as in the charts."""
    return format_html(
        '<svg class="line-sample" width="30" height="8" aria-hidden="true"><line x1="0" y1="4" x2="30" y2="4" '
        'stroke="{}" stroke-width="2.5" stroke-dasharray="{}"/></svg>',
        colour,
        " ".join(map(str, dash)),
    )
