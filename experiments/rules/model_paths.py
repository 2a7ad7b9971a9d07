"""Which models a server may load: the one rule every door applies to a model path (the
experiment form and the API through it, an imported config, a service profile, a deploy
decision's arm) and the worker applies again before it starts a server (its own settings,
its own disk).

Unless the administrator sets SPECDASH_ALLOW_ANY_MODEL_PATH, a model is an absolute path
inside SPECDASH_MODELS_DIR, symbolic links resolved: no other file on the host, and no
model id (whose download could run a repository's code paths the team never reviewed).

A path holds only characters a POSIX shell reads as themselves (letters, digits and
`@ % + = : , . / - _`) and does not start with `-` (vLLM would read it as an option). Every
command specdash shows is quoted (experiments/rules/commands.py), so another character could
not run anything; but a path such as `a';id;'b` or `$(id)` is never a model a team meant, and
shown in a command it invites a hand-edited copy that would run it. The models folder itself
is the administrator's choice and may hold any character; where an administrator allows any
path, a path that exists on the host may hold other characters too.
"""

import os
import re
from pathlib import PurePosixPath

from django.conf import settings

# The characters shlex.quote leaves bare: a word made of them means itself to a POSIX shell.
_SHELL_PLAIN = re.compile(r"[\w@%+=:,./-]+", re.ASCII)


def model_path_refusal(value: str) -> str | None:
    """Why the model may not be loaded, or None when it may."""
    allow_any = settings.SPECDASH_ALLOW_ANY_MODEL_PATH
    models_dir = PurePosixPath(os.path.realpath(settings.SPECDASH_MODELS_DIR))
    # As typed and as it will be stored (normalised: "a//-" is "a/-"), so that every door agrees.
    shell_problem = _shell_problem(_chosen_part(value, models_dir)) or _shell_problem(
        _chosen_part(os.path.normpath(value), models_dir) if value else value
    )
    if shell_problem and not (allow_any and os.path.exists(value)):
        return shell_problem
    if allow_any:
        return None
    if not value.startswith("/"):
        return (
            f"Give an absolute path inside {models_dir}. Model ids and other paths are only "
            "allowed when the administrator sets SPECDASH_ALLOW_ANY_MODEL_PATH."
        )
    path = PurePosixPath(os.path.realpath(value))
    if path == models_dir or not path.is_relative_to(models_dir):
        return (
            f"The path must lie inside {models_dir}. Other paths are only allowed when the "
            "administrator sets SPECDASH_ALLOW_ANY_MODEL_PATH."
        )
    return None


def _chosen_part(value: str, models_dir: PurePosixPath) -> str:
    """The part of a path a user chose: below the models folder, which the administrator named
    (and which may hold any character), or all of it."""
    prefix = f"{models_dir}/"
    return value.removeprefix(prefix) if value.startswith(prefix) else value


def _shell_problem(value: str) -> str | None:
    if not value:
        return "Give a model path."
    if value.startswith("-"):
        return "A model path must not start with “-” (vLLM would read it as an option)."
    unsafe = sorted({char for char in value if not _SHELL_PLAIN.fullmatch(char)})
    if not unsafe:
        return None
    shown = " ".join(_named(char) for char in unsafe[:5])
    return (
        f"A model path may hold only letters, digits and @ % + = : , . / - _ (found {shown}), so that "
        "every command specdash shows runs as written. An administrator who sets "
        "SPECDASH_ALLOW_ANY_MODEL_PATH may allow other paths that exist on the host."
    )


def _named(char: str) -> str:
    if char.isspace():
        return "a space" if char == " " else f"whitespace U+{ord(char):04X}"
    if not char.isprintable():
        return f"U+{ord(char):04X}"
    return f"“{char}”"
