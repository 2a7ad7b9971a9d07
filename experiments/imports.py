"""Import `vllm bench serve` result files as a read-only, finished experiment.

The files (read and checked by experiments/bench_files.py) become arms, levels and runs:
- an arm per label (`vllm bench serve --label`); a file without one is the baseline when it
  has no speculative-decoding figures, else "speculative k=N";
- an arm's method and settings come from a `speculative_config` entry in the file (written by
  `--metadata speculative_config='{"method": "ngram", ...}'`), else from a method named in its
  label (ngram, draft, eagle3, eagle, mtp, suffix);
- the level is the file's max_concurrency; several files of one arm and level are
  repetitions, in the order of their dates.
Each file becomes one succeeded run with a summary of the figures the file has, and one row per
request when it was saved with --save-detailed. Nothing is stored unless every file fits.
"""

import json
import logging
import math
from collections import defaultdict
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from experiments import json_input, teams, text_rules
from experiments.analysis import experiment_analyse
from experiments.bench_files import BenchFile, BenchFileRefused
from experiments.limits import MAX_LOOKUP, MAX_SPECULATIVE_TOKENS
from experiments.model_paths import model_path_refusal
from experiments.models import Arm, Experiment, RequestRecord, Run, RunSummary

logger = logging.getLogger(__name__)

BASELINE = "baseline"
# Words in a label that name a method, the more specific first.
LABEL_METHODS = (
    ("eagle3", Arm.Method.EAGLE3), ("eagle-3", Arm.Method.EAGLE3), ("eagle", Arm.Method.EAGLE),
    ("ngram", Arm.Method.NGRAM), ("n-gram", Arm.Method.NGRAM), ("draft", Arm.Method.DRAFT_MODEL),
    ("mtp", Arm.Method.MTP), ("suffix", Arm.Method.SUFFIX),
)  # fmt: skip
# File statistic → RunSummary column, per latency.
LATENCY_COLUMNS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
STATISTIC_COLUMNS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}


@dataclass(frozen=True)
class ImportedArm:
    label: str
    method: str
    k: int | None
    params: dict
    files: list[BenchFile]


def _arm_label(file: BenchFile) -> str:
    if file.label:
        return file.label
    return f"speculative k={file.k}" if file.is_speculative else BASELINE


def _config_problem(config) -> str | None:
    """What makes a decoded speculative config one specdash does not run, or None. The keys
    are the ones the experiment form sets (Arm.PARAM_KEYS: every other vLLM key, such as
    trust_remote_code, is refused), with the form's bounds, and a path passes the installation's
    model rule (experiments/model_paths.py) as one typed into the form does."""
    if not isinstance(config, dict):
        return "it is not a JSON object"
    problem = json_input.problem(config)
    if problem:
        return f"it holds {problem}"
    method, k = config.get("method"), config.get("num_speculative_tokens")
    if method not in Arm.PARAM_KEYS:
        return f"its method must be one of {', '.join(Arm.PARAM_KEYS)}, not {json.dumps(method)[:40]}"
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        return f"its num_speculative_tokens must be a whole number from 1 to {MAX_SPECULATIVE_TOKENS}"
    params = {key: value for key, value in config.items() if key not in ("method", "num_speculative_tokens")}
    unknown = sorted(set(params) - set(Arm.PARAM_KEYS[method]))
    if unknown:
        return f"specdash does not pass {', '.join(unknown)} to vLLM for {method} (it sets {_keys(method)})"
    return _params_problem(method, params)


def _keys(method: str) -> str:
    return ", ".join(("method", "num_speculative_tokens", *Arm.PARAM_KEYS[method]))


def _params_problem(method: str, params: dict) -> str | None:
    missing = [key for key in Arm.PARAM_KEYS[method] if key not in params]
    if missing:
        return f"{method} needs {', '.join(missing)}"
    if method == Arm.Method.NGRAM:
        low, high = params["prompt_lookup_min"], params["prompt_lookup_max"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_LOOKUP for v in (low, high)):
            return f"prompt_lookup_min and prompt_lookup_max must be whole numbers from 1 to {MAX_LOOKUP}"
        return f"prompt_lookup_min ({low}) exceeds prompt_lookup_max ({high})" if low > high else None
    if "model" in params:
        model = params["model"]
        if not isinstance(model, str) or not model.strip() or text_rules.control_char(model):
            return "its model must be a path without control characters"
        refusal = model_path_refusal(model)
        return f"its model {model[:80]!r}: {refusal}" if refusal else None
    return None


def _from_config(label: str, files: list[BenchFile], text: str) -> tuple[str, int, dict]:
    try:
        config = json_input.loads(text)
    except ValueError as error:  # json.JSONDecodeError included
        config, problem = None, f"it is not valid JSON ({error})"
    else:
        problem = _config_problem(config)
    if problem:
        names = ", ".join(f.name for f in files)
        raise BenchFileRefused(f"{names}: speculative_config {text[:80]!r} cannot be imported: {problem}.")
    params = {key: value for key, value in config.items() if key not in ("method", "num_speculative_tokens")}
    return config["method"], config["num_speculative_tokens"], params


def _method(label: str, files: list[BenchFile]) -> tuple[str, int | None, dict]:
    """The arm's method, k and other settings, from the files' config or the label."""
    if not any(file.is_speculative for file in files):
        return Arm.Method.BASELINE, None, {}
    configs = {file.values["speculative_config"] for file in files if "speculative_config" in file.values}
    if len(configs) > 1:
        raise BenchFileRefused(f"The files of arm “{label}” name different speculative configs: {sorted(configs)}.")
    if configs:
        return _from_config(label, files, configs.pop())
    method = next((m for word, m in LABEL_METHODS if word in label.casefold()), None)
    if method is None:
        names = ", ".join(file.name for file in files)
        raise BenchFileRefused(
            f"{names}: which speculative method is “{label}”? Run vllm bench serve with --metadata "
            "speculative_config='<the server's --speculative-config>', or a --label that names the method "
            "(ngram, draft, eagle, eagle3, mtp, suffix)."
        )
    return method, max((file.k or 1) for file in files), {}


def arms_from_files(files: list[BenchFile]) -> list[ImportedArm]:
    """Group the files into arms, the baseline first; refuse what cannot be compared."""
    models = sorted({file.model_id for file in files})
    if len(models) > 1:
        raise BenchFileRefused(f"The files come from different models ({', '.join(models)}): import them apart.")
    groups = defaultdict(list)
    for file in files:
        groups[_arm_label(file)].append(file)
    arms = [ImportedArm(label, *_method(label, group), group) for label, group in groups.items()]
    baselines = [arm for arm in arms if arm.method == Arm.Method.BASELINE]
    if len(baselines) != 1:
        found = ", ".join(f"“{arm.label}”" for arm in baselines) or "none"
        raise BenchFileRefused(
            f"Exactly one arm must run without speculation (files with no spec_decode figures); found {found}. "
            "Import the baseline's files too, and give baseline files one --label."
        )
    return baselines + [arm for arm in arms if arm.method != Arm.Method.BASELINE]


def _summary_fields(file: BenchFile) -> dict:
    values = file.values
    fields = {
        "duration_s": values["duration"], "completed": values["completed"], "failed": values.get("failed", 0),
        "total_input_tokens": values["total_input_tokens"], "total_output_tokens": values["total_output_tokens"],
        "request_throughput": values["request_throughput"], "output_throughput": values["output_throughput"],
        "goodput": values.get("request_goodput"), "spec_num_drafts": values.get("spec_decode_num_drafts"),
        "spec_num_draft_tokens": values.get("spec_decode_draft_tokens"),
        "spec_num_accepted_tokens": values.get("spec_decode_accepted_tokens"),
        "spec_accepted_per_pos": file.accepted_per_position,
    }  # fmt: skip
    for latency, column in LATENCY_COLUMNS.items():
        for statistic, suffix in STATISTIC_COLUMNS.items():
            fields[f"{column}_{suffix}_ms"] = values.get(f"{statistic}_{latency}_ms")
    return fields


def _request_rows(run: Run, file: BenchFile) -> list[RequestRecord]:
    return [
        RequestRecord(
            run=run, prompt_index=index, input_tokens=r.input_tokens, output_tokens=r.output_tokens, sent_at_s=0.0,
            ttft_ms=r.ttft_ms, e2e_ms=r.e2e_ms, error=r.error,
            tpot_ms=(r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1)
            if r.e2e_ms is not None and r.ttft_ms is not None and r.output_tokens > 1 else None,
        )
        for index, r in enumerate(file.requests)
    ]  # fmt: skip


def _experiment_fields(name: str, arms: list[ImportedArm]) -> dict:
    files = [file for arm in arms for file in arm.files]
    per_cell = defaultdict(int)
    for arm in arms:
        for file in arm.files:
            per_cell[(arm.label, file.level)] += 1
    completed = max(file.values["completed"] + file.values.get("failed", 0) for file in files)
    output = max(file.values["total_output_tokens"] / max(file.values["completed"], 1) for file in files)
    now = timezone.now()
    return {
        "name": name, "status": Experiment.Status.FINISHED, "started_at": now, "finished_at": now,
        "source": Experiment.Source.IMPORTED, "target_model": files[0].model_id[:500] or "unknown",
        "worker_queue": "import", "prompt_set": "", "num_prompts": max(completed, 1),
        "max_tokens": max(math.ceil(output), 1), "concurrency_levels": sorted({file.level for file in files}),
        "repetitions": max(per_cell.values()), "server_per_block": False, "warmup_requests": 0,
        "imported_files": [
            {"name": f.name, "arm": arm.label, "level": f.level, "date": f.date, "detailed": bool(f.requests)}
            for arm in arms for f in arm.files
        ],
    }  # fmt: skip


def _store_runs(experiment: Experiment, arm: Arm, imported: ImportedArm, position: int) -> None:
    by_level = defaultdict(list)
    for file in imported.files:
        by_level[file.level].append(file)
    for level_position, level in enumerate(sorted(by_level), start=1):
        for repetition, file in enumerate(sorted(by_level[level], key=lambda f: (f.date, f.name)), start=1):
            total = file.values["completed"] + file.values.get("failed", 0)
            run = Run.objects.create(
                experiment=experiment, arm=arm, concurrency=level, repetition=repetition, block_position=position,
                level_position=level_position, status=Run.Status.SUCCEEDED, worker_host="import", attempts=1,
                requests_done=total, requests_total=total, started_at=experiment.started_at,
                finished_at=experiment.finished_at,
            )  # fmt: skip
            RunSummary.objects.create(run=run, **_summary_fields(file))
            RequestRecord.objects.bulk_create(_request_rows(run, file))


@transaction.atomic
def experiment_import(*, owner, name: str, files: list[BenchFile], team=None) -> Experiment:
    """Store the files as a finished experiment of `owner` in `team` (or the owner's only
    team), then analyse it as any other."""
    arms = arms_from_files(files)
    experiment = Experiment.objects.create(
        owner=owner, team=teams.team_for_write(owner, team), **_experiment_fields(name, arms)
    )
    for position, imported in enumerate(arms):
        arm = Arm.objects.create(
            experiment=experiment, position=position, label=imported.label, method=imported.method,
            num_speculative_tokens=imported.k, params=imported.params,
        )  # fmt: skip
        _store_runs(experiment, arm, imported, position + 1)
    try:
        with transaction.atomic():
            experiment_analyse(experiment=experiment)
    except Exception:
        # As for a measured experiment: the summaries still show, without speedups.
        logger.exception("analysis of imported experiment %s failed", experiment.id)
    return experiment
