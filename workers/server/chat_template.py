"""Which chat template a server for the chat endpoint gets.

A model that brings its own template (`chat_template` in tokenizer_config.json, or a
chat_template.jinja beside it) keeps it: vLLM applies it. A local model without one (the demo
models) gets the plain template shipped here, passed with --chat-template (vLLM 0.32 takes a
file path), so the demo models need no rebuild. A model id is left to vLLM.
"""

import json
from pathlib import Path

PLAIN_TEMPLATE = Path(__file__).resolve().parent / "chat_templates" / "plain.jinja"


def has_own_template(model_dir: Path) -> bool:
    if (model_dir / "chat_template.jinja").is_file():
        return True
    config = model_dir / "tokenizer_config.json"
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError):
        return False


def chat_template_for(model: str) -> str | None:
    """The --chat-template to pass for `model`, or None to use the model's own."""
    model_dir = Path(model)
    if not model.startswith("/") or has_own_template(model_dir):
        return None
    return str(PLAIN_TEMPLATE)
