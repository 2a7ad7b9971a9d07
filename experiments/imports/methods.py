"""Which speculative method and k an imported arm ran, and the settings that go with them.

In order of trust:
1. a `speculative_config` entry in the files (`vllm bench serve --metadata
   speculative_config='{…}'`, the server's --speculative-config), checked as the experiment
   form checks an arm;
2. a line the user gives on the Import page or to `import_bench --method`, for files without
   one, per label (or per file name for a file without a label), in one of two forms:
       ngram k=3 = ngram 3
       ngram k=3 = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
   The first names a method (an Arm.Method value) and k only: the arm stores no settings, since
   no n-gram lookup lengths or draft model path can be made up from it (as for a method named
   in a label). The second is a speculative config, checked as one from a file;
3. a method named in the label (ngram_gpu, ngram, draft, eagle3, eagle, mtp, suffix), k from the figures.
A config and a line for the same files are refused rather than one of them silently winning;
a k that differs from the number of draft positions the files report acceptance for is refused.
"""

import json
from dataclasses import replace

from experiments.definition.speculative_configs import config_params as _params
from experiments.definition.speculative_configs import config_problem, is_k
from experiments.imports.bench_files import MAX_FILES, MAX_LABEL_CHARS, BenchFile, BenchFileRefused, StatedMethod
from experiments.measurement.planning.limits import MAX_SPECULATIVE_TOKENS
from experiments.models import Arm
from experiments.rules import json_input, text_rules

# Words in a label that name a method, the more specific first.
LABEL_METHODS = (
    ("eagle3", Arm.Method.EAGLE3), ("eagle-3", Arm.Method.EAGLE3), ("eagle", Arm.Method.EAGLE),
    ("ngram_gpu", Arm.Method.NGRAM_GPU), ("ngram-gpu", Arm.Method.NGRAM_GPU),
    ("ngram", Arm.Method.NGRAM), ("n-gram", Arm.Method.NGRAM), ("draft", Arm.Method.DRAFT_MODEL),
    ("mtp", Arm.Method.MTP), ("suffix", Arm.Method.SUFFIX),
)  # fmt: skip
MAX_METHODS_CHARS = 20_000
MAX_KEY_CHARS = max(MAX_LABEL_CHARS, 255)  # a label, or a file name (255 bytes on most file systems)
METHODS_HINT = (
    "Say which method such files ran, one line per label (or per file name for a file without a label): "
    "“label = method k”, or “label = {speculative config}”."
)


def _decoded_config(text: str) -> tuple[dict | None, str | None]:
    """(the config, None), or (None or what was decoded, why it cannot be imported): without a
    problem the config is a dict (config_problem refuses anything else)."""
    try:
        config = json_input.loads(text)
    except ValueError as error:  # json.JSONDecodeError included
        return None, f"it is not valid JSON ({error})"
    return config, config_problem(config)


# ---------------------------------------------------------------- the user's lines


def methods_parse(text: str) -> dict[str, StatedMethod]:
    """{label or file name: the method it ran} from the lines a user gives; BenchFileRefused
    naming the line when one cannot be read."""
    if len(text) > MAX_METHODS_CHARS:
        raise BenchFileRefused(
            f"The methods have {len(text):,} characters, more than the {MAX_METHODS_CHARS:,} allowed."
        )
    found = text_rules.control_char(text, allowed=text_rules.LINE_BREAKS)
    if found:
        raise BenchFileRefused(f"The methods hold an invisible control character ({found}).")
    lines = [(number, line.strip()) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if len(lines) > MAX_FILES:
        raise BenchFileRefused(f"{len(lines)} method lines: at most one per file, {MAX_FILES}.")
    stated: dict[str, StatedMethod] = {}
    for number, line in lines:
        key, method = _line(number, line)
        if key in stated:
            raise BenchFileRefused(f"Methods, line {number}: “{key}” is named on {stated[key].line} already.")
        stated[key] = method
    return stated


def _split(line: str) -> tuple[str, str] | None:
    """(key, value) of “key = value”; a value that is a config starts at its brace, so that a
    label such as “ngram k=3” keeps its own “=”."""
    brace = line.find("{")
    if brace >= 0:
        head, value = line[:brace].rstrip(), line[brace:]
        if not head.endswith("="):
            return None
        key = head[:-1]
    else:
        key, equals, value = line.rpartition("=")
        if not equals:
            return None
    key, value = key.strip(), value.strip()
    return (key, value) if key and value else None


def _line(number: int, line: str) -> tuple[str, StatedMethod]:
    where = f"line {number}"
    split = _split(line)
    if split is None:
        raise BenchFileRefused(
            f"Methods, {where} ({line[:80]!r}): write “label = method k” or “label = {{speculative config}}”."
        )
    key, value = split
    if len(key) > MAX_KEY_CHARS:
        raise BenchFileRefused(f"Methods, {where}: “{key[:40]}…” is longer than any label or file name.")
    if value.startswith("{"):
        config, problem = _decoded_config(value)
        if problem:
            raise BenchFileRefused(f"Methods, {where}: the config for “{key}” cannot be imported: {problem}.")
        assert config is not None
        return key, StatedMethod(config["method"], config["num_speculative_tokens"], _params(config), where)
    return key, StatedMethod(*_short_form(where, key, value), params={}, line=where)


def _short_form(where: str, key: str, value: str) -> tuple[str, int]:
    parts = value.split()
    methods = ", ".join(Arm.PARAM_KEYS)
    if len(parts) != 2:
        raise BenchFileRefused(f"Methods, {where}: “{value[:80]}” for “{key}” must be a method and k, e.g. “ngram 3”.")
    method, k = parts
    if method not in Arm.PARAM_KEYS:
        raise BenchFileRefused(f"Methods, {where}: the method of “{key}” must be one of {methods}, not “{method}”.")
    if not k.isdigit() or not is_k(int(k)):
        raise BenchFileRefused(
            f"Methods, {where}: k for “{key}” must be a whole number from 1 to {MAX_SPECULATIVE_TOKENS}, not “{k}”."
        )
    return method, int(k)


def files_with_methods(files: list[BenchFile], stated: dict[str, StatedMethod]) -> list[BenchFile]:
    """The files with the method each line gives them; BenchFileRefused naming every line that
    names no speculative file, or a labelled file by its name."""
    found = [_key_problem(key, method, files) for key, method in stated.items()]
    problems = [problem for problem in found if problem]
    if problems:
        raise BenchFileRefused("\n".join(problems))
    return [replace(file, stated=stated.get(file.label or file.name)) for file in files]


def _key_problem(key: str, method: StatedMethod, files: list[BenchFile]) -> str | None:
    matched = [file for file in files if file.label == key or (not file.label and file.name == key)]
    if not matched:
        named = next((file for file in files if file.name == key), None)
        if named is not None:
            return f"Methods, {method.line}: {key} has the label “{named.label}”: name the label, for all its files."
        return f"Methods, {method.line}: no file has the label, or is named, “{key[:100]}”."
    if not any(file.is_speculative for file in matched):
        return (
            f"Methods, {method.line}: “{key}” has no speculative-decoding figures (no spec_decode_* in the files), "
            "so it ran without speculation and takes no method."
        )
    return None


# ---------------------------------------------------------------- an arm's method


def arm_label(file: BenchFile, baseline: str) -> str:
    """The arm a file belongs to: its label, else the method stated for it, else its k."""
    if file.label:
        return file.label
    if file.stated is not None:
        return f"{file.stated.method} k={file.stated.k}"
    return f"speculative k={file.k}" if file.is_speculative else baseline


def _names(files: list[BenchFile]) -> str:
    return ", ".join(file.name for file in files)


def _k_checked(files: list[BenchFile], source: str, k: int) -> int:
    drafted = sorted({file.k for file in files if file.k})
    if drafted and drafted != [k]:
        raise BenchFileRefused(
            f"{_names(files)}: {source} says k = {k}, but the files report acceptance at "
            f"{' and '.join(map(str, drafted))} draft positions."
        )
    return k


def _from_config(files: list[BenchFile], text: str) -> tuple[str, int, dict]:
    config, problem = _decoded_config(text)
    if problem:
        raise BenchFileRefused(f"{_names(files)}: speculative_config {text[:80]!r} cannot be imported: {problem}.")
    assert config is not None
    k = _k_checked(files, "the speculative_config", config["num_speculative_tokens"])
    return config["method"], k, _params(config)


def _from_lines(label: str, files: list[BenchFile]) -> tuple[str, int, dict] | None:
    stated = {(s.method, s.k, json.dumps(s.params, sort_keys=True)): s for s in (f.stated for f in files) if s}
    if len(stated) > 1:
        lines = ", ".join(s.line for s in stated.values())
        raise BenchFileRefused(f"The files of arm “{label}” are given different methods (methods, {lines}).")
    if not stated:
        return None
    (method,) = stated.values()
    return method.method, _k_checked(files, f"methods, {method.line},", method.k), method.params


def arm_method(label: str, files: list[BenchFile]) -> tuple[str, int | None, dict]:
    """The arm's method, k and other settings: from the files' config, the user's line or the label."""
    if not any(file.is_speculative for file in files):
        return Arm.Method.BASELINE, None, {}
    configs = {file.values["speculative_config"] for file in files if "speculative_config" in file.values}
    if len(configs) > 1:
        raise BenchFileRefused(f"The files of arm “{label}” name different speculative configs: {sorted(configs)}.")
    stated = _from_lines(label, files)
    if configs and stated:
        raise BenchFileRefused(
            f"{_names(files)}: “{label}” has a speculative_config in its files and a method line too; leave the "
            "line out (the files' config is what the server ran)."
        )
    if configs:
        return _from_config(files, configs.pop())
    if stated:
        return stated
    method = next((m for word, m in LABEL_METHODS if word in label.casefold()), None)
    if method is None:
        raise BenchFileRefused(
            f"{_names(files)}: which speculative method is “{label}”? {METHODS_HINT} Or run vllm bench serve with "
            "--metadata speculative_config='<the server's --speculative-config>', or a --label that names the "
            "method (ngram, ngram_gpu, draft, eagle, eagle3, mtp, suffix)."
        )
    return method, max((file.k or 1) for file in files), {}
