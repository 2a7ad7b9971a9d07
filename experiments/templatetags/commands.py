"""{{ config|speculative_config_flag }}: a speculative config (a mapping, or its JSON as stored)
as the shell-quoted flag a person pastes (experiments/rules/commands.py)."""

from django import template

from experiments.rules import commands

register = template.Library()


@register.filter
def speculative_config_flag(config) -> str:
    return commands.speculative_config_flag(config) if config else ""
