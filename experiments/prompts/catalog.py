"""The prompts an experiment sends: built-in prompt sets shipped as data, or synthetic prompts.

Built-in sets live in `experiments/prompts/data/<name>.json` as
{"name", "title", "description", "prompts": [str, ...]} and were written for this project.

This module imports nothing from Django, so the demo model builder (run with the vLLM
python, see workers/host/demo_models.py) trains on exactly the prompts the benchmarks send.
"""

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from experiments.prompts.input_lengths import parse_length_distribution

PROMPT_SETS_DIR = Path(__file__).resolve().parent / "data"

# The value of Experiment.Endpoint.CHAT.
CHAT = "chat"
# The values of Experiment.WorkloadKind (tests check they agree).
BUILTIN = "builtin"
UPLOADED = "uploaded"
SYNTHETIC = "synthetic"

# Synthetic prompts draw from these words. Strings of random words are nothing like real
# requests: speculation is accepted far less (or, with n-gram lookup, differently) than on
# real text, so results measured on them distort acceptance and speedup.
SYNTHETIC_VOCABULARY = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy process music market sense nation plan college interest "
    "death experience effect use class control care field development role effort rate heart "
    "drug show leader light voice wife police mind price report decision son view relationship "
    "town road arm difference value building action model season society tax director position "
    "player record paper space ground form event official matter center couple site project "
    "activity star table need court oil situation cost industry figure street image phone data "
    "picture practice piece land product doctor wall patient worker news test movie north love "
    "support technology step baby computer type attention film tree source organization hair "
    "window evidence population bank"
).split()


@dataclass(frozen=True)
class PromptSet:
    name: str
    title: str
    description: str
    prompts: tuple[str, ...]


class UploadedSet(Protocol):
    """What the prompts read of an uploaded set (a models.UploadedPromptSet)."""

    @property
    def prompt_count(self) -> int: ...
    @property
    def items(self) -> Sequence[Mapping[str, Any]]: ...  # [{"prompt", "category", "messages"?}, ...]
    @property
    def has_messages(self) -> bool: ...


class Workload(Protocol):
    """What the prompts read of an experiment (a models.Experiment)."""

    @property
    def workload_kind(self) -> str: ...
    @property
    def prompt_set(self) -> str: ...
    @property
    def uploaded_prompt_set(self) -> UploadedSet | None: ...
    @property
    def synthetic_input_len(self) -> int | None: ...
    @property
    def input_lengths(self) -> str: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def num_prompts(self) -> int: ...
    @property
    def warmup_requests(self) -> int: ...
    @property
    def seed(self) -> int: ...


# What a request sends: a prompt's text, or chat messages ({"role", "content"}).
Request = str | list[dict[str, Any]]


def builtin_prompt_sets() -> dict[str, PromptSet]:
    """Every built-in prompt set by name, in name order."""
    return dict(_load_prompt_sets())


@cache
def _load_prompt_sets() -> tuple[tuple[str, PromptSet], ...]:
    sets = (_read_prompt_set(path) for path in sorted(PROMPT_SETS_DIR.glob("*.json")))
    return tuple((prompt_set.name, prompt_set) for prompt_set in sets)


def _read_prompt_set(path: Path) -> PromptSet:
    data = json.loads(path.read_text(encoding="utf-8"))
    prompts = data["prompts"]
    if data["name"] != path.stem:
        raise ValueError(f"Prompt set file {path.name} declares the name {data['name']!r}.")
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ValueError(f"Prompt set file {path.name} needs a non-empty list of non-empty strings.")
    return PromptSet(name=data["name"], title=data["title"], description=data["description"], prompts=tuple(prompts))


def prompt_set_choices() -> list[tuple[str, str]]:
    """(name, title) pairs for a form's select."""
    return [(name, prompt_set.title) for name, prompt_set in builtin_prompt_sets().items()]


def get_prompt_set(name: str) -> PromptSet:
    prompt_sets = builtin_prompt_sets()
    if name not in prompt_sets:
        known = ", ".join(prompt_sets) or "none"
        raise ValueError(f"Unknown prompt set {name!r}; the built-in sets are: {known}.")
    return prompt_sets[name]


def prompt_set_hash(name: str) -> str:
    """sha256 (hex) of the set's prompts as compact UTF-8 JSON: changes when any prompt changes."""
    canonical = json.dumps(list(get_prompt_set(name).prompts), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


SYNTHETIC_CAPACITY_CAP = 10**9


def synthetic_capacity(input_len: int) -> int:
    """How many distinct synthetic prompts of `input_len` words exist, capped at
    SYNTHETIC_CAPACITY_CAP (no workload asks for more, and the exact number for long
    prompts is an integer with millions of digits)."""
    distinct: int = len(SYNTHETIC_VOCABULARY) ** min(input_len, 4)
    return min(distinct, SYNTHETIC_CAPACITY_CAP)


def synthetic_prompts_of_lengths(*, lengths: list[int], seed: int) -> list[str]:
    """One distinct synthetic prompt per entry of `lengths` (in words), in that order; drawn
    as synthetic_prompts draws them, so a fixed length gives the same prompts as it does."""
    if len(set(lengths)) == 1:
        return synthetic_prompts(count=len(lengths), input_len=lengths[0], seed=seed)
    rng = random.Random(seed)
    prompts: dict[str, None] = {}
    for length in lengths:
        size = len(prompts)
        while len(prompts) == size:
            prompts.setdefault(" ".join(rng.choices(SYNTHETIC_VOCABULARY, k=length)))
    return list(prompts)


def synthetic_prompts(*, count: int, input_len: int, seed: int) -> list[str]:
    """`count` distinct prompts of `input_len` words drawn at random from a fixed vocabulary.

    Deterministic for a seed, and the first n prompts do not depend on `count`. A draw
    that repeats an earlier prompt is skipped: a prompt sent twice in a run would count
    twice in an interval. These are random-token prompts: acceptance and speedup
    measured on them are not those of real traffic (see SYNTHETIC_VOCABULARY).
    """
    if count < 0 or input_len < 1:
        raise ValueError(f"Synthetic prompts need count >= 0 and input_len >= 1, got {count} and {input_len}.")
    if count > synthetic_capacity(input_len):
        raise ValueError(
            f"Only {synthetic_capacity(input_len)} distinct synthetic prompts of {input_len} word(s) exist."
        )
    rng = random.Random(seed)
    prompts: dict[str, None] = {}
    while len(prompts) < count:
        prompts.setdefault(" ".join(rng.choices(SYNTHETIC_VOCABULARY, k=input_len)))
    return list(prompts)


def longest_prompt_words(name: str, count: int) -> int:
    """Words in the longest of the set's first `count` prompts: a lower bound of its length
    in tokens (tokenizers split at whitespace, then within words)."""
    return max((len(prompt.split()) for prompt in get_prompt_set(name).prompts[:count]), default=0)


def prompt_set_shortfall(name: str, *, warmup: int, measured: int) -> str | None:
    """Why the built-in set `name` cannot give `warmup` + `measured` distinct prompts, or None.

    Each prompt is sent at most once per run, and warm-up prompts are never measured, so
    a run needs that many distinct prompts.
    """
    size = len(get_prompt_set(name).prompts)
    if warmup + measured <= size:
        return None
    return (
        f"The prompt set “{name}” has {size} prompts, but {warmup} warm-up and {measured} measured requests need "
        f"{warmup + measured} distinct ones (no prompt is sent twice in a run). Lower the prompts per level or the "
        "warm-up requests."
    )


def experiment_prompts(experiment: Workload) -> list[str]:
    """The prompts of every run of a models.Experiment, in the order they are sent: the
    `warmup_requests` warm-up prompts, then the `num_prompts` measured ones.

    Every prompt appears once, warm-up prompts are never measured, and every run sends the
    same list, so a prompt's index in it identifies the prompt in every run and arm (and,
    for a built-in set, is its index in the set).
    """
    count = experiment.warmup_requests + experiment.num_prompts
    if experiment.workload_kind == BUILTIN:
        shortfall = prompt_set_shortfall(
            experiment.prompt_set, warmup=experiment.warmup_requests, measured=experiment.num_prompts
        )
        if shortfall:
            raise ValueError(shortfall)
        return list(get_prompt_set(experiment.prompt_set).prompts[:count])
    if experiment.workload_kind == UPLOADED:
        return uploaded_prompts(experiment.uploaded_prompt_set, count, input_lengths=experiment.input_lengths)
    if experiment.workload_kind == SYNTHETIC:
        if experiment.input_lengths:
            lengths = parse_length_distribution(experiment.input_lengths).draw(count, experiment.seed)
            return synthetic_prompts_of_lengths(lengths=lengths, seed=experiment.seed)
        if not experiment.synthetic_input_len:
            raise ValueError("A synthetic workload needs synthetic_input_len.")
        return synthetic_prompts(count=count, input_len=experiment.synthetic_input_len, seed=experiment.seed)
    raise ValueError(
        f"Unknown workload kind {experiment.workload_kind!r}; expected {BUILTIN!r}, {UPLOADED!r} or {SYNTHETIC!r}."
    )


def uploaded_selection(prompt_set: UploadedSet, input_lengths: str = "") -> list[int]:
    """Which items of an uploaded set (a models.UploadedPromptSet) an experiment may send, by
    their index in the file, in file order: every item, or with `input_lengths` (one length or
    a range, in words) those whose prompt has that many words. ValueError for a histogram."""
    if not input_lengths:
        return list(range(prompt_set.prompt_count))
    low, high = parse_length_distribution(input_lengths).word_range()
    return [index for index, item in enumerate(prompt_set.items) if low <= len(item["prompt"].split()) <= high]


def uploaded_prompts(prompt_set: UploadedSet | None, count: int, *, input_lengths: str = "") -> list[str]:
    """The first `count` prompts of an uploaded set's selection (uploaded_selection); chat
    messages are sent as their text. A prompt's index in this list identifies it in every run."""
    if prompt_set is None:
        raise ValueError("An uploaded workload needs its prompt set.")
    selection = uploaded_selection(prompt_set, input_lengths)
    if count > len(selection):
        raise ValueError(f"The prompt set {prompt_set} has {len(selection)} prompts to send; a run needs {count}.")
    return [prompt_set.items[index]["prompt"] for index in selection[:count]]


def experiment_requests(experiment: Workload) -> list[Request]:
    """What each request of a run sends, in experiment_prompts' order: the prompt text on the
    completions endpoint; on the chat endpoint a list of messages, an uploaded set's own or
    the prompt as one user message."""
    prompts = experiment_prompts(experiment)
    if experiment.endpoint != CHAT:
        return list(prompts)  # as a list[Request]: the type checker takes no list[str] for one (lists are invariant)
    uploaded = experiment.uploaded_prompt_set if experiment.workload_kind == UPLOADED else None
    if uploaded is not None and uploaded.has_messages:
        selection = uploaded_selection(uploaded, experiment.input_lengths)[: len(prompts)]
        return [uploaded.items[index]["messages"] for index in selection]
    return [[{"role": "user", "content": prompt}] for prompt in prompts]
