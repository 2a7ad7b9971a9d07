"""Result files of `vllm bench serve --save-result` (with or without `--save-detailed`), read
and checked before anything is stored.

Free of Django: a file's bytes in, a BenchFile (the figures specdash can show) or a
BenchFileRefused naming the file and what is wrong with it out. What such a file does not
hold (per-request acceptance, the environment, blocks, output token ids) is listed in
WHAT_AN_IMPORT_LACKS, which the experiment page prints.
"""

import json
import math
from dataclasses import dataclass, field

from experiments.measurement.planning.limits import MAX_SPECULATIVE_TOKENS
from experiments.rules import json_input, text_rules

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_FILES = 64
MAX_REQUESTS = 100_000
MAX_LABEL_CHARS = 100  # Arm.label
# The largest value of the columns a file's counts go to (PostgreSQL's integer and bigint).
COUNT_MAX = 2**31 - 1
BIG_COUNT_MAX = 2**63 - 1

WHAT_AN_IMPORT_LACKS = (
    "Imported from vllm bench serve result files: a summary per run, not specdash's measurements.",
    "No per-request acceptance: vLLM's benchmark client does not keep each request's speculative metrics, "
    "so there is no acceptance along the output, no conditional acceptance from what was drafted and no "
    "tokens per decode step.",
    "No environment: the files do not record the hardware, the vLLM and torch versions or the server's command "
    "line, so nothing shows that the arms ran alike.",
    "No blocks: the runs were not interleaved in randomised blocks on fresh servers. Several files of one arm at "
    "one level are read as repetitions, in the order of their dates; drift of the host between them is "
    "confounded with the arm.",
    "No output fidelity: the files hold no output token ids, so specdash cannot check that speculation left the "
    "outputs unchanged.",
    "Percentiles: vLLM writes the mean, the median and the percentiles asked for with --metric-percentiles "
    "(p99 by default); a p90 is shown only where the file has one.",
)

# Key → JSON type the file must give it, for the keys specdash reads: a "count" is an integer
# from 0 to COUNT_MAX, a "big count" one to BIG_COUNT_MAX (the columns they are stored in).
REQUIRED = {
    "duration": "number",
    "completed": "count",
    "total_input_tokens": "big count",
    "total_output_tokens": "big count",
    "request_throughput": "number",
    "output_throughput": "number",
    "max_concurrency": "count",
}
OPTIONAL = {
    "failed": "count",
    "date": "text",
    "label": "text",
    "model_id": "text",
    "backend": "text",
    "num_prompts": "count",
    "request_goodput": "number",
    "spec_decode_num_drafts": "big count",
    "spec_decode_draft_tokens": "big count",
    "spec_decode_accepted_tokens": "big count",
    "spec_decode_acceptance_rate": "number",
    "spec_decode_acceptance_length": "number",
    "spec_decode_per_position_acceptance_rates": "list of numbers",
    "speculative_config": "text",
    "request_rate": "rate",
    "burstiness": "number",
}
LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATISTICS = ("mean", "median", "std", "p90", "p99")
DETAILED = {
    "input_lens": "count",
    "output_lens": "count",
    "ttfts": "number",
    "latencies": "number",
    "errors": "text",
}


class BenchFileRefused(ValueError):
    """The file cannot be imported; the message names it and says why."""


@dataclass(frozen=True)
class BenchRequest:
    input_tokens: int
    output_tokens: int
    ttft_ms: float | None
    e2e_ms: float | None
    error: str


@dataclass(frozen=True)
class StatedMethod:
    """The method and k a user says a file without a speculative config ran (a line of the
    import's methods, experiments/imports/methods.py); params only when the line gave a config."""

    method: str
    k: int
    params: dict
    line: str


@dataclass(frozen=True)
class BenchFile:
    """One `vllm bench serve` run: one arm at one concurrency level."""

    name: str
    level: int
    label: str
    date: str
    model_id: str
    values: dict  # the keys of REQUIRED and OPTIONAL that the file has, and "<stat>_<latency>_ms"
    requests: list[BenchRequest] = field(default_factory=list)
    stated: StatedMethod | None = None

    @property
    def is_speculative(self) -> bool:
        return self.values.get("spec_decode_num_drafts") is not None

    @property
    def k(self) -> int | None:
        """Draft length, from the per-position rates vLLM reports (one per position)."""
        rates = self.values.get("spec_decode_per_position_acceptance_rates")
        return len(rates) if rates else None

    @property
    def accepted_per_position(self) -> list[int] | None:
        """Accepted tokens by position, back from vLLM's per-position rate × drafts."""
        rates, drafts = (
            self.values.get("spec_decode_per_position_acceptance_rates"),
            self.values.get("spec_decode_num_drafts"),
        )
        if not rates or drafts is None:
            return None
        return [round(rate * drafts) for rate in rates]


KIND_NAMES = {
    "count": f"whole number from 0 to {COUNT_MAX:,}",
    "big count": f"whole number from 0 to {BIG_COUNT_MAX:,}",
    "number": "finite number",
    "text": "text",
    "list of numbers": "list of finite numbers",
    "rate": 'number greater than 0, or "inf"',
}


def _is(value, kind: str) -> bool:
    if kind in ("count", "big count"):
        top = COUNT_MAX if kind == "count" else BIG_COUNT_MAX
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= top
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "text":
        return isinstance(value, str)
    if kind == "rate":  # vLLM writes "inf" for --request-rate inf, its default
        return value == "inf" or (_is(value, "number") and value > 0)
    return isinstance(value, list) and all(_is(item, "number") for item in value)


def _decode(name: str, data: bytes) -> dict:
    if len(data) > MAX_FILE_BYTES:
        raise BenchFileRefused(f"{name}: {len(data):,} bytes, more than the {MAX_FILE_BYTES:,} a result file may have.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BenchFileRefused(f"{name}: not UTF-8 text (byte 0x{data[error.start]:02x} at {error.start}).") from None
    try:
        content = json_input.loads(text)
    except json.JSONDecodeError as error:
        ends_early = error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string")
        ending = " (the file ends early: truncated?)" if ends_early else ""
        raise BenchFileRefused(
            f"{name}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}{ending}."
        ) from None
    except ValueError as error:  # e.g. an integer of more than 4,300 digits
        raise BenchFileRefused(f"{name}: not valid JSON: {error}.") from None
    if not isinstance(content, dict):
        raise BenchFileRefused(f"{name}: a result file is a JSON object, not a {type(content).__name__}.")
    problem = json_input.problem(content)
    if problem:
        raise BenchFileRefused(f"{name}: {problem} in a text, which cannot be stored.")
    return content


def _typed(name: str, content: dict, key: str, kind: str):
    value = content[key]
    if not _is(value, kind):
        shown = json.dumps(value)[:40]
        raise BenchFileRefused(f"{name}: “{key}” must be a {KIND_NAMES[kind]}, not {shown}.")
    return value


def _checked_model_id(name: str, model_id: str) -> str:
    """A file's model_id becomes the imported experiment's target model, shown as a name: the
    rules for a name apply (it is a label of what ran elsewhere, never a path specdash loads)."""
    problem = text_rules.name_problem(model_id)
    if problem:
        raise BenchFileRefused(f"{name}: the model_id holds {problem}, which a model's name must not.")
    return model_id.strip()


def _checked_label(name: str, label: str) -> str:
    """A label becomes an arm's label: the form's rules for one apply."""
    label = label.strip()
    if len(label) > MAX_LABEL_CHARS:
        raise BenchFileRefused(
            f"{name}: the label has {len(label)} characters, more than the {MAX_LABEL_CHARS} allowed."
        )
    problem = text_rules.name_problem(label)
    if problem:
        raise BenchFileRefused(f"{name}: the label holds {problem}, which an arm's label must not.")
    return label


def _values(name: str, content: dict) -> dict:
    if content.get("max_concurrency") is None and "duration" in content:
        raise BenchFileRefused(
            f"{name}: no max_concurrency. specdash compares arms at concurrency levels: run vllm bench serve with "
            "--max-concurrency."
        )
    missing = [key for key in REQUIRED if key not in content]
    if missing:
        raise BenchFileRefused(
            f"{name}: not a vllm bench serve result (missing {', '.join(missing)}); save one with --save-result."
        )
    values = {key: _typed(name, content, key, kind) for key, kind in REQUIRED.items()}
    values |= {key: _typed(name, content, key, kind) for key, kind in OPTIONAL.items() if content.get(key) is not None}
    for latency in LATENCIES:
        for statistic in STATISTICS:
            key = f"{statistic}_{latency}_ms"
            if content.get(key) is not None:
                values[key] = _typed(name, content, key, "number")
    if values["max_concurrency"] < 1:
        raise BenchFileRefused(f"{name}: max_concurrency must be at least 1 (got {values['max_concurrency']}).")
    if values["duration"] <= 0:
        raise BenchFileRefused(f"{name}: duration must be greater than 0 (got {values['duration']}).")
    per_request = values["total_output_tokens"] / max(values["completed"], 1)
    if per_request > COUNT_MAX:
        raise BenchFileRefused(
            f"{name}: {per_request:,.0f} output tokens a request, more than the {COUNT_MAX:,} allowed."
        )
    rates = values.get("spec_decode_per_position_acceptance_rates") or []
    if len(rates) > MAX_SPECULATIVE_TOKENS:
        raise BenchFileRefused(
            f"{name}: acceptance rates for {len(rates)} draft positions; an arm drafts at most "
            f"{MAX_SPECULATIVE_TOKENS} tokens a step."
        )
    return values


def _requests(name: str, content: dict) -> list[BenchRequest]:
    """The per-request arrays of a --save-detailed file, checked to line up; [] without them.
    (Without --save-detailed vLLM drops the other lists but keeps "latencies".)"""
    if "ttfts" not in content:
        return []
    columns = {}
    for key in DETAILED:
        column = content.get(key)
        if not isinstance(column, list):
            raise BenchFileRefused(f"{name}: “{key}” must be a list, one entry per request.")
        if len(column) > MAX_REQUESTS:
            raise BenchFileRefused(f"{name}: {len(column):,} requests, more than the {MAX_REQUESTS:,} allowed.")
        columns[key] = column
    if len({len(column) for column in columns.values()}) > 1:
        lengths = ", ".join(f"{key} {len(column)}" for key, column in columns.items())
        raise BenchFileRefused(f"{name}: the per-request lists differ in length ({lengths}).")
    return [_request(name, index, columns) for index in range(len(columns["input_lens"]))]


def _request(name: str, index: int, columns: dict) -> BenchRequest:
    row = {key: column[index] for key, column in columns.items()}
    error = row["errors"] or ""
    for key, kind in DETAILED.items():
        wanted = "text" if key == "errors" else kind
        if row[key] is not None and not _is(row[key], wanted):
            raise BenchFileRefused(f"{name}: request {index}: “{key}” must be a {KIND_NAMES[wanted]}.")
    ttft, latency = row["ttfts"], row["latencies"]
    return BenchRequest(
        input_tokens=row["input_lens"] or 0,
        output_tokens=row["output_lens"] or 0,
        ttft_ms=ttft * 1000 if ttft and not error else None,
        e2e_ms=latency * 1000 if latency and not error else None,
        error=str(error),
    )


def bench_file_read(name: str, data: bytes) -> BenchFile:
    """Read one result file; BenchFileRefused, naming it, when it cannot be imported."""
    content = _decode(name, data)
    values = _values(name, content)
    return BenchFile(
        name=name,
        level=values["max_concurrency"],
        label=_checked_label(name, values.get("label", "")),
        date=values.get("date", ""),
        model_id=_checked_model_id(name, values.get("model_id", "")),
        values=values,
        requests=_requests(name, content),
    )


def bench_files_read(files: list[tuple[str, bytes]]) -> list[BenchFile]:
    """Read every file, or refuse them all with one message per bad file (nothing is half-imported)."""
    if not files:
        raise BenchFileRefused("Choose one or more result files.")
    if len(files) > MAX_FILES:
        raise BenchFileRefused(f"{len(files)} files: at most {MAX_FILES} can be imported at once.")
    read, problems = [], []
    for name, data in files:
        try:
            read.append(bench_file_read(name, data))
        except BenchFileRefused as refused:
            problems.append(str(refused))
    if problems:
        raise BenchFileRefused("\n".join(problems))
    return read
