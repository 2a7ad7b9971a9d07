"""Markup built as strings for what a page repeats many times: the history's select boxes
and the verdict cells (an experiment's headline, a citation's verdicts). Django's widget
templates render each option through a template of its own, and template nodes per cell
cost most of a list's rendering at 10,000 experiments (scripts/bench_history.py)."""

from collections.abc import Iterable
from typing import Any, cast

from django import forms, template
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe
from django.utils.text import slugify

from experiments.analysis.verdict_grid import OUTCOME_STYLE
from experiments.measurement.stats import verdicts

register = template.Library()


def _options(field: forms.BoundField, choice_field: forms.ChoiceField) -> str:
    chosen = str(field.value() if field.value() is not None else "")
    # Django normalises what is assigned to a ChoiceField's choices into (value, label) pairs
    # (normalize_choices); the stubs type the getter as any input the setter takes.
    pairs = cast(Iterable[tuple[Any, Any]], choice_field.choices)
    return "".join(
        f'<option value="{escape(value)}"{" selected" if str(value) == chosen else ""}>{escape(label)}</option>'
        for value, label in pairs
    )


@register.simple_tag
def filter_control(field: forms.BoundField):
    """The field's control: a select built here, anything else as Django renders it."""
    if not isinstance(field.field, forms.ChoiceField) or isinstance(field.field.widget, forms.HiddenInput):
        return field.as_widget()
    invalid = mark_safe(' aria-invalid="true"') if field.errors else ""
    return format_html(
        '<select name="{}" id="{}"{}>{}</select>',
        field.html_name,
        field.auto_id,
        invalid,
        mark_safe(_options(field, field.field)),
    )


def _cell(level: int, outcome: str, figure: str) -> str:
    outcome_html = escape(outcome)
    if outcome in verdicts.CALLS:
        word = f'<strong><span aria-hidden="true">{OUTCOME_STYLE[outcome][0]}</span> {outcome_html}</strong>'
        reason = ""
    else:
        word = f"<em>{outcome_html}</em>"
        reason = f' title="{escape(verdicts.NO_CALL_REASON.get(outcome, ""))}"'
    return (
        f'<li class="outcome-{slugify(outcome)}" data-outcome="{outcome_html}"{reason}>'
        f'<span class="level">at {level}</span> {word} <span class="figure">{escape(figure)}</span></li>'
    )


@register.simple_tag
def verdict_cells(arm_label: str, cells):
    """An arm's verdict at each level: its name, then per level the word (with the grid's
    symbol for a call) and the figure. `cells` are GridCells or a citation's kept dicts."""
    items = "".join(
        _cell(c["level"], c["outcome"], c["figure"]) if isinstance(c, dict) else _cell(c.level, c.outcome, c.figure)
        for c in cells
    )
    return format_html(
        '<div class="headline"><span class="headline-arm">{}</span><ul class="headline-cells">{}</ul></div>',
        arm_label,
        mark_safe(items),
    )
