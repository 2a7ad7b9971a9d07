"""Table cells of the results block: a shown figure plus the exact value that sorting and
"Copy" (tab-separated) use, so the copied numbers are the stored ones, not rounded.

The cells are built as plain strings (numbers need no escaping; labels are escaped): the
page renders a few thousand of them and template nodes per cell would cost most of its time.

`result_head` and `result_table` wrap a section's heading and its table in the markup every
section shares, kept in partials/results/head.html and table.html.
"""

from django import template
from django.template.base import token_kwargs
from django.utils.html import escape
from django.utils.safestring import mark_safe

register = template.Library()

DASH = "–"


def _shown(value, decimals: int) -> str:
    return DASH if value is None else f"{value:.{decimals}f}"


def _exact(value) -> str:
    return "" if value is None else repr(value)


def _value_td(value, decimals: int) -> str:
    return f'<td class="num" data-value="{_exact(value)}">{_shown(value, decimals)}</td>'


def _spread_td(spread, decimals: int) -> str:
    tsv = "\t".join(_exact(v) for v in (spread.mean, spread.min, spread.max))
    if spread.mean is None:
        return f'<td class="num" data-value="" data-tsv="{tsv}">{DASH}</td>'
    return (
        f'<td class="num" data-value="{_exact(spread.mean)}" data-tsv="{tsv}">{_shown(spread.mean, decimals)}'
        f'<span class="range">{_shown(spread.min, decimals)}–{_shown(spread.max, decimals)}</span></td>'
    )


def _ratio_td(estimate, decimals: int, outcome: str | None = None) -> str:
    """A ratio with its 95% interval (or its note) under it; with `outcome`, the verdict's word too."""
    words = [] if outcome is None else [escape(outcome)]
    if estimate is None or estimate.point is None:
        empty = "\t".join(["", "", "", *words])
        return f'<td class="num" data-value="" data-tsv="{empty}">{DASH}</td>'
    tsv = "\t".join([*(_exact(v) for v in (estimate.point, estimate.ci_low, estimate.ci_high)), *words])
    interval: str
    if estimate.ci_low is None:
        interval = escape(estimate.note or "no interval")
    else:
        interval = f"[{_shown(estimate.ci_low, decimals)}, {_shown(estimate.ci_high, decimals)}]"
    word = "".join(f'<span class="outcome-word">{w}</span>' for w in words)
    return (
        f'<td class="num" data-value="{_exact(estimate.point)}" data-tsv="{tsv}">{_shown(estimate.point, decimals)}×'
        f'<span class="range">{interval}</span>{word}</td>'
    )


def _interval_td(estimate, decimals: int) -> str:
    return _ratio_td(estimate, decimals, estimate.outcome if estimate is not None else "")


@register.simple_tag
def arm_td(arm):
    """The arm's name with its colour, as in the charts."""
    label = escape(arm.label)
    return mark_safe(
        f'<td data-value="{label}"><span class="swatch" style="background: {escape(arm.colour)}"></span>{label}</td>'
    )


@register.simple_tag
def value_tds(*values, decimals=0):
    """One cell per value, shown with `decimals` decimals."""
    return mark_safe("".join(_value_td(value, decimals) for value in values))


@register.simple_tag
def recorded_tds(*values, decimals=0):
    """As value_tds, but a missing value reads "not recorded" (a figure older runs lack)."""
    return mark_safe(
        "".join(
            _value_td(value, decimals) if value is not None else '<td class="num muted">not recorded</td>'
            for value in values
        )
    )


@register.simple_tag
def spread_tds(spread, *columns, decimals=2):
    """Per column of a Cell's `spread`: the mean over the repetitions with min–max under it;
    copied as three columns."""
    return mark_safe("".join(_spread_td(spread[column], decimals) for column in columns))


@register.simple_tag
def interval_tds(*estimates, decimals=3):
    """Per speedup estimate: the point with its 95% interval and verdict under it; copied as point,
    low, high and verdict."""
    return mark_safe("".join(_interval_td(estimate, decimals) for estimate in estimates))


@register.simple_tag
def ratio_tds(*estimates, decimals=3):
    """Per ratio that is not a verdict's (point, ci_low, ci_high, note): the point with its 95%
    interval, or the note, under it; copied as point, low and high."""
    return mark_safe("".join(_ratio_td(estimate, decimals) for estimate in estimates))


@register.simple_tag
def spread_ths(*labels):
    return mark_safe(
        "".join(
            f'<th class="num" data-tsv="{escape(label)} mean\t{escape(label)} min\t{escape(label)} max">'
            f"{escape(label)}</th>"
            for label in labels
        )
    )


def _ratio_th(label: str, copied: list[str]) -> str:
    tsv = "\t".join(escape(f"{label}{suffix}") for suffix in copied)
    return f'<th class="num" data-tsv="{tsv}">{escape(label)}</th>'


@register.simple_tag
def interval_ths(*labels):
    return mark_safe("".join(_ratio_th(label, [" speedup", " 95% low", " 95% high", " verdict"]) for label in labels))


@register.simple_tag
def ratio_ths(*labels):
    return mark_safe("".join(_ratio_th(label, ["", " 95% low", " 95% high"]) for label in labels))


class _PartialNode(template.Node):
    """Renders a partial with the tag's keyword arguments, and what the tag encloses as `body`."""

    def __init__(self, template_name, kwargs, nodelist):
        self.template_name, self.kwargs, self.nodelist = template_name, kwargs, nodelist

    def render(self, context):
        values = {name: value.resolve(context) for name, value in self.kwargs.items()}
        partial = context.template.engine.get_template(self.template_name)
        with context.push(body=self.nodelist.render(context), **values):
            return partial.render(context)


def _enclosing_tag(name, template_name):
    def compile_tag(parser, token):
        bits = token.split_contents()[1:]
        kwargs = token_kwargs(bits, parser)
        if bits:
            raise template.TemplateSyntaxError(f"{name} takes keyword arguments only, not {bits[0]!r}")
        nodelist = parser.parse((f"end{name}",))
        parser.delete_first_token()
        return _PartialNode(template_name, kwargs, nodelist)

    register.tag(name, compile_tag)


# {% result_head title="…" %}toggle buttons, if any{% endresult_head %}
_enclosing_tag("result_head", "experiments/partials/results/head.html")
# {% result_table table_id="table-…" caption="…" short=True %}<thead>…</thead><tbody>…</tbody>{% endresult_table %}
_enclosing_tag("result_table", "experiments/partials/results/table.html")
