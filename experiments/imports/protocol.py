"""The protocol an imported `vllm bench serve` file was measured under, and which files must
share it before they are compared.

A file records the prompts it sent (num_prompts), its request rate and burstiness, and the
tokens its completed requests took in and gave out; it does not record the input or output
length asked for (--random-input-len, --random-output-len, max_tokens). Token lengths are
therefore compared as means over the completed requests, within TOKEN_TOLERANCE: outputs that
stop at an end-of-sequence token, or requests that fail, move a mean a little between runs of
one protocol, where another length asked for moves it by far more. The other fields must be equal.

Which files must agree:
- the files of one arm at one level, which are read as repetitions of one measurement;
- each arm at a level and the baseline there, since the arm is compared with it;
- every file on the request rate: an experiment has one, and under a fixed rate no level's
  throughput gets a verdict.
Levels may otherwise differ (say, more prompts at a higher concurrency); the experiment page
then shows each level's protocol. Free of Django.
"""

from collections import defaultdict
from dataclasses import asdict, dataclass

from experiments.imports.bench_files import BenchFile, BenchFileRefused

TOKEN_TOLERANCE = 0.10
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Protocol:
    prompts: int
    input_tokens: float  # mean over the completed requests
    output_tokens: float
    request_rate: str  # "inf" (as fast as the concurrency allows), a number of requests/s, or NOT_RECORDED
    burstiness: str

    def as_json(self) -> dict:
        return asdict(self)


def _recorded(values: dict, key: str) -> str:
    value = values.get(key)
    if value is None:
        return NOT_RECORDED
    return value if value == "inf" else repr(float(value))


def protocol_of(file: BenchFile) -> Protocol:
    values = file.values
    completed = max(values["completed"], 1)
    recorded = {key: _recorded(values, key) for key in ("request_rate", "burstiness")}
    return Protocol(
        prompts=values.get("num_prompts", values["completed"] + values.get("failed", 0)),
        input_tokens=values["total_input_tokens"] / completed,
        output_tokens=values["total_output_tokens"] / completed,
        **recorded,
    )


def _tokens_differ(a: float, b: float) -> bool:
    return abs(a - b) > TOKEN_TOLERANCE * max(a, b)


def differences(a: Protocol, b: Protocol) -> list[tuple[str, str, str]]:
    """(field, a's, b's) for each field in which two protocols differ; [] when they agree."""
    found: list[tuple[str, str, str]] = (
        [("num_prompts", str(a.prompts), str(b.prompts))] if a.prompts != b.prompts else []
    )
    for name, x, y in (
        ("input tokens a request (mean)", a.input_tokens, b.input_tokens),
        ("output tokens a request (mean)", a.output_tokens, b.output_tokens),
    ):
        if _tokens_differ(x, y):
            found.append((name, f"{x:.1f}", f"{y:.1f}"))
    for name, ours, theirs in (
        ("request_rate", a.request_rate, b.request_rate),
        ("burstiness", a.burstiness, b.burstiness),
    ):
        if NOT_RECORDED not in (ours, theirs) and ours != theirs:
            found.append((name, ours, theirs))
    return found


def _by_level(files: list[BenchFile]) -> dict[int, list[BenchFile]]:
    levels = defaultdict(list)
    for file in sorted(files, key=lambda f: (f.date, f.name)):
        levels[file.level].append(file)
    return levels


def _cell_problems(label: str, files: list[BenchFile]) -> list[str]:
    problems = []
    for level, cell in sorted(_by_level(files).items()):
        first = protocol_of(cell[0])
        for other in cell[1:]:
            found = differences(first, protocol_of(other))
            if found:
                listed = "; ".join(f"{name} {x} and {y}" for name, x, y in found)
                problems.append(
                    f"{cell[0].name} and {other.name}, both “{label}” at concurrency {level}, differ in protocol: "
                    f"{listed}. Files of one arm and level are repetitions of one measurement, so they "
                    "must share the prompts, input and output lengths and request rate."
                )
    return problems


def _arm_problems(label: str, files: list[BenchFile], baseline: dict[int, list[BenchFile]]) -> list[str]:
    problems = []
    for level, cell in sorted(_by_level(files).items()):
        if level not in baseline:
            continue
        found = differences(protocol_of(cell[0]), protocol_of(baseline[level][0]))
        if found:
            listed = "; ".join(f"{name} {x}, the baseline's {y}" for name, x, y in found)
            problems.append(
                f"{cell[0].name} (“{label}” at concurrency {level}) was not measured as the baseline's "
                f"{baseline[level][0].name} was: {listed}. An arm is compared with "
                "the baseline at each level, so both must share the protocol there."
            )
    return problems


def _rate_problem(files: list[BenchFile]) -> str | None:
    rates = defaultdict(list)
    for file in files:
        rates[protocol_of(file).request_rate].append(file.name)
    rates.pop(NOT_RECORDED, None)
    if len(rates) < 2:
        return None
    listed = "; ".join(f"{rate}: {', '.join(names)}" for rate, names in sorted(rates.items()))
    return (
        f"The files were run at different request rates ({listed}). An experiment has one request rate, and "
        "under a fixed one throughput gets no verdict at any level: import them apart."
    )


def protocol_check(arms: list[tuple[str, list[BenchFile]]]) -> None:
    """Refuse files that must share a protocol and do not, naming every such pair; `arms` is
    (label, files) with the baseline first."""
    (_, baseline_files), *others = arms
    baseline = _by_level(baseline_files)
    problems = [problem for label, files in arms for problem in _cell_problems(label, files)]
    problems += [problem for label, files in others for problem in _arm_problems(label, files, baseline)]
    rate = _rate_problem([file for _, files in arms for file in files])
    if rate:
        problems.append(rate)
    if problems:
        raise BenchFileRefused("\n".join(problems))


def request_rate(files: list[BenchFile]) -> float | None:
    """The one request rate of checked files, in requests/s; None for as fast as the concurrency allows."""
    rates = {protocol_of(file).request_rate for file in files} - {NOT_RECORDED, "inf"}
    return float(rates.pop()) if rates else None
