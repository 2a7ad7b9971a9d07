"""Every command specdash shows or stores for a person to run: built here, each argument quoted
for a POSIX shell, so that pasting it runs exactly the argument vector it was made from
(`shlex.split` gives it back) whatever a path or a config holds. A decision's
--speculative-config is what a team copies into production: its JSON is one argument, never
text between hand-written quotes.
"""

import json
import shlex
from collections.abc import Mapping, Sequence

SPECULATIVE_CONFIG_FLAG = "--speculative-config"


def shell_join(argv: Sequence[str]) -> str:
    """The command line that a POSIX shell splits back into exactly `argv`."""
    return shlex.join(argv)


def config_json(config: Mapping[str, object]) -> str:
    """A speculative config as vLLM's flag takes it: JSON, keys sorted, so one config reads one way."""
    return json.dumps(dict(config), sort_keys=True)


def speculative_config_args(config: Mapping[str, object] | str) -> list[str]:
    """The server's arguments for a config (a mapping, or its JSON as stored)."""
    return [SPECULATIVE_CONFIG_FLAG, config if isinstance(config, str) else config_json(config)]


def speculative_config_flag(config: Mapping[str, object] | str) -> str:
    """`--speculative-config '<json>'`, quoted for a shell."""
    return shell_join(speculative_config_args(config))
