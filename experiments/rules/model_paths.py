"""Which models a server may load: the one rule the form applies to what a user types and
the worker applies again before it starts a server (its own settings, its own disk).

Unless the administrator sets SPECDASH_ALLOW_ANY_MODEL_PATH, a model is an absolute path
inside SPECDASH_MODELS_DIR, symbolic links resolved: no other file on the host, and no
model id (whose download could run a repository's code paths the team never reviewed).
"""

import os
from pathlib import PurePosixPath

from django.conf import settings


def model_path_refusal(value: str) -> str | None:
    """Why the model may not be loaded, or None when it may."""
    if settings.SPECDASH_ALLOW_ANY_MODEL_PATH:
        return None
    models_dir = PurePosixPath(os.path.realpath(settings.SPECDASH_MODELS_DIR))
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
