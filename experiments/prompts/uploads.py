"""Prompt files that users upload, read and checked before anything is stored.

Three layouts, told apart by their content:
- JSONL of prompts: one object a line, {"prompt": "...", "category": "..."};
- JSONL of chat messages: one object a line, {"messages": [{"role": "user", "content": "..."}, ...],
  "category": "..."}; the conversation up to its last user message is the request;
- ShareGPT: a JSON array of {"conversations": [{"from": "human", "value": "..."}, ...], "category": ...};
  the first human turn is the prompt (as vLLM's ShareGPT loader takes it).
"category" is optional (also read from "label"). Free of Django: bytes in, a PromptFile or a
PromptFileRefused naming the file, the line and the problem out.
"""

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from experiments.rules import json_input, text_rules

MAX_FILE_BYTES = 5 * 1024 * 1024
MAX_PROMPTS = 10_000
MAX_PROMPT_CHARS = 50_000
MAX_CATEGORIES = 50
MAX_CATEGORY_CHARS = 64
ROLES = ("system", "user", "assistant")

PROMPTS = "prompts"
CHAT = "chat"
SHAREGPT = "sharegpt"
FORMAT_NAMES = {PROMPTS: "JSONL of prompts", CHAT: "JSONL of chat messages", SHAREGPT: "ShareGPT conversations"}
# Upper bounds of the length histogram's bins, in words (whitespace-separated).
HISTOGRAM_BINS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class PromptFileRefused(ValueError):
    """The file cannot be a prompt set; the message names it, the line and the problem."""


class ItemJson(TypedDict):
    """An item as UploadedPromptSet.items stores it."""

    prompt: str
    category: str
    messages: NotRequired[list[dict[str, str]]]  # {"role", "content"}, for chat messages


class LengthBin(TypedDict):
    lo: int
    hi: int | None  # None for the last bin, which has no upper bound
    count: int


@dataclass(frozen=True)
class PromptItem:
    """One request of the set: a raw prompt, or chat messages (then `prompt` is their text)."""

    prompt: str
    messages: tuple[tuple[str, str], ...] | None
    category: str

    def as_json(self) -> ItemJson:
        item: ItemJson = {"prompt": self.prompt, "category": self.category}
        if self.messages is not None:
            item["messages"] = [{"role": role, "content": content} for role, content in self.messages]
        return item

    @property
    def words(self) -> int:
        return len(self.prompt.split())


@dataclass(frozen=True)
class PromptFile:
    format: str
    items: tuple[PromptItem, ...]

    @property
    def sha256(self) -> str:
        """Changes when any prompt, message or category changes (compact UTF-8 JSON of the items)."""
        canonical = json.dumps([item.as_json() for item in self.items], ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    @property
    def categories(self) -> dict[str, int]:
        """Prompts per category, in order of first appearance; {} when the file has none."""
        counts = Counter(item.category for item in self.items)
        return {} if set(counts) == {""} else dict(counts)

    def length_histogram(self) -> list[LengthBin]:
        """Prompts per bin of length in words: {"lo", "hi", "count"}, the empty bins left out."""
        lows = (1, *(bound + 1 for bound in HISTOGRAM_BINS))
        bins: list[LengthBin] = [
            {"lo": lo, "hi": hi, "count": 0} for lo, hi in zip(lows, (*HISTOGRAM_BINS, None), strict=True)
        ]
        for item in self.items:
            next(b for b in bins if b["hi"] is None or item.words <= b["hi"])["count"] += 1
        return [b for b in bins if b["count"]]


def _text(name: str, data: bytes) -> str:
    if len(data) > MAX_FILE_BYTES:
        limit = f"more than the {MAX_FILE_BYTES:,} a prompt file may have"
        raise PromptFileRefused(f"{name}: {len(data):,} bytes, {limit}.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise PromptFileRefused(f"{name}: not UTF-8 text (byte 0x{data[error.start]:02x} at {error.start}).") from None


def _load(where: str, text: str) -> Any:
    try:
        value = json_input.loads(text)
    except json.JSONDecodeError as error:
        raise PromptFileRefused(f"{where}: not valid JSON ({error.msg}, column {error.colno}).") from None
    except ValueError as error:  # e.g. an integer of more than 4,300 digits
        raise PromptFileRefused(f"{where}: not valid JSON ({error}).") from None
    problem = json_input.problem(value)
    if problem:
        raise PromptFileRefused(f"{where}: {problem} in the text, which cannot be stored.")
    return value


def _category(where: str, record: dict[str, Any]) -> str:
    category = record.get("category", record.get("label", ""))
    if category is None:
        return ""
    if not isinstance(category, str) or len(category) > MAX_CATEGORY_CHARS:
        raise PromptFileRefused(f"{where}: “category” must be text of at most {MAX_CATEGORY_CHARS} characters.")
    problem = text_rules.name_problem(category)
    if problem:
        # A category is shown on the experiment page and in the history, as an arm's label is.
        raise PromptFileRefused(f"{where}: “category” holds {problem}, which a category must not.")
    return " ".join(category.split())


def _prompt_text(where: str, value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PromptFileRefused(f"{where}: {what} must be non-empty text.")
    if len(value) > MAX_PROMPT_CHARS:
        raise PromptFileRefused(f"{where}: {what} has {len(value):,} characters, more than {MAX_PROMPT_CHARS:,}.")
    found = text_rules.prose_control_char(value)
    if found:
        # The prompt set's page shows the text: a direction override would show it reordered.
        raise PromptFileRefused(f"{where}: {what} holds an invisible control character ({found}).")
    return value


def _messages(where: str, value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise PromptFileRefused(f"{where}: “messages” must be a non-empty list of {{role, content}} objects.")
    messages = []
    for number, message in enumerate(value, start=1):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise PromptFileRefused(f"{where}: message {number} needs a role among {', '.join(ROLES)}.")
        messages.append((message["role"], _prompt_text(where, message.get("content"), f"message {number}'s content")))
    while messages and messages[-1][0] == "assistant":
        messages.pop()  # the reply is what the model is to write
    if not messages or messages[-1][0] != "user":
        raise PromptFileRefused(f"{where}: the conversation has no user message to answer.")
    return tuple(messages)


def _jsonl_item(where: str, record: object) -> PromptItem:
    if not isinstance(record, dict) or ("prompt" in record) == ("messages" in record):
        raise PromptFileRefused(f"{where}: each line must be an object with either “prompt” or “messages”.")
    if "prompt" in record:
        return PromptItem(_prompt_text(where, record["prompt"], "“prompt”"), None, _category(where, record))
    messages = _messages(where, record["messages"])
    return PromptItem("\n".join(content for _, content in messages), messages, _category(where, record))


def _sharegpt_item(where: str, record: object) -> PromptItem:
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list):
        raise PromptFileRefused(f"{where}: a ShareGPT entry is an object with a “conversations” list.")
    assert isinstance(record, dict)  # turns came from it
    human = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") == "human"), None)
    prompt = _prompt_text(where, human, "the first human turn")
    return PromptItem(prompt, (("user", prompt),), _category(where, record))


def _jsonl(name: str, text: str) -> tuple[str, list[PromptItem]]:
    items: list[PromptItem] = []
    kinds: set[bool] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(items) >= MAX_PROMPTS:
            raise PromptFileRefused(f"{name}: more than {MAX_PROMPTS:,} prompts.")
        item = _jsonl_item(f"{name}, line {number}", _load(f"{name}, line {number}", line))
        kinds.add(item.messages is not None)
        items.append(item)
    if len(kinds) > 1:
        raise PromptFileRefused(f"{name}: some lines have “prompt” and others “messages”; use one layout per file.")
    return (CHAT if kinds == {True} else PROMPTS), items


def _sharegpt(name: str, records: list[object]) -> list[PromptItem]:
    if len(records) > MAX_PROMPTS:
        raise PromptFileRefused(f"{name}: {len(records):,} conversations, more than {MAX_PROMPTS:,}.")
    return [_sharegpt_item(f"{name}, entry {number}", record) for number, record in enumerate(records, start=1)]


def _checked(name: str, items: list[PromptItem]) -> tuple[PromptItem, ...]:
    if not items:
        raise PromptFileRefused(f"{name}: no prompts.")
    seen: dict[str, int] = {}
    for number, item in enumerate(items, start=1):
        key = json.dumps(item.as_json(), sort_keys=True)
        if key in seen:
            raise PromptFileRefused(
                f"{name}: prompt {number} repeats prompt {seen[key]}; a prompt sent twice in a run counts twice "
                "in every interval."
            )
        seen[key] = number
    categories = {item.category for item in items}
    if len(categories) > MAX_CATEGORIES:
        raise PromptFileRefused(f"{name}: {len(categories)} categories, more than {MAX_CATEGORIES}.")
    if "" in categories and len(categories) > 1:
        missing = next(number for number, item in enumerate(items, start=1) if not item.category)
        raise PromptFileRefused(f"{name}: prompt {missing} has no category while others have one.")
    return tuple(items)


def prompt_file_read(name: str, data: bytes) -> PromptFile:
    """Read an uploaded prompt file; PromptFileRefused naming it, the line and the problem."""
    text = _text(name, data)
    if text.lstrip().startswith("["):
        records = _load(name, text)
        return PromptFile(SHAREGPT, _checked(name, _sharegpt(name, records)))
    layout, items = _jsonl(name, text)
    return PromptFile(layout, _checked(name, items))
