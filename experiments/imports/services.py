"""Import `vllm bench serve` result files as a read-only, finished experiment.

The files (read and checked by experiments/imports/bench_files.py) become arms, levels and runs:
- an arm per label (`vllm bench serve --label`); a file without one is the baseline when it
  has no speculative-decoding figures, else named by the method stated for it or by its k;
- an arm's method and settings come from the files' `speculative_config`, a line the user
  gives, or a method named in its label (experiments/imports/methods.py);
- the level is the file's max_concurrency; several files of one arm and level are
  repetitions, in the order of their dates, and must share a protocol, as must each arm and
  the baseline at a level (experiments/imports/protocol.py).
Each file becomes one succeeded run with a summary of the figures the file has, and one row per
request when it was saved with --save-detailed; where a cell has no rows, its latency speedups
are point estimates from the files' means (experiments/imports/estimates.py). Nothing is stored
unless every file fits.
"""

import logging
import math
from collections import defaultdict
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from experiments import teams
from experiments.analysis.services import experiment_analyse
from experiments.imports import estimates as import_estimates
from experiments.imports import methods as import_methods
from experiments.imports import protocol as import_protocol
from experiments.imports.bench_files import BenchFile, BenchFileRefused
from experiments.models import Arm, Experiment, RequestRecord, Run, RunSummary
from experiments.rules import speculation_targets

logger = logging.getLogger(__name__)

BASELINE = "baseline"
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


def arms_from_files(files: list[BenchFile]) -> list[ImportedArm]:
    """Group the files into arms, the baseline first; refuse what cannot be compared."""
    models = sorted({file.model_id for file in files})
    if len(models) > 1:
        raise BenchFileRefused(f"The files come from different models ({', '.join(models)}): import them apart.")
    groups = defaultdict(list)
    for file in files:
        groups[import_methods.arm_label(file, BASELINE)].append(file)
    arms = [ImportedArm(label, *import_methods.arm_method(label, group), group) for label, group in groups.items()]
    baselines = [arm for arm in arms if arm.method == Arm.Method.BASELINE]
    if len(baselines) != 1:
        found = ", ".join(f"“{arm.label}”" for arm in baselines) or "none"
        raise BenchFileRefused(
            f"Exactly one arm must run without speculation (files with no spec_decode figures); found {found}. "
            "Import the baseline's files too, and give baseline files one --label."
        )
    arms = baselines + [arm for arm in arms if arm.method != Arm.Method.BASELINE]
    for arm in arms:
        problem = speculation_targets.target_problem(arm.method, models[0])
        if problem:
            raise BenchFileRefused(f"Arm “{arm.label}”: {problem}.")
    import_protocol.protocol_check([(arm.label, arm.files) for arm in arms])
    return arms


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


def _file_entry(arm: ImportedArm, file: BenchFile) -> dict:
    """What the experiment page lists for one imported file: where it went and its own protocol."""
    return {
        "name": file.name, "arm": arm.label, "level": file.level, "date": file.date, "detailed": bool(file.requests),
        **import_protocol.protocol_of(file).as_json(),
    }  # fmt: skip


def _experiment_fields(name: str, arms: list[ImportedArm]) -> dict:
    """The experiment's protocol fields hold one number each: where levels differ, the largest
    (the page shows each level's from imported_files, experiments/templatetags/imported.py)."""
    files = [file for arm in arms for file in arm.files]
    protocols = [import_protocol.protocol_of(file) for file in files]
    per_cell: defaultdict[tuple[str, int], int] = defaultdict(int)
    for arm in arms:
        for file in arm.files:
            per_cell[(arm.label, file.level)] += 1
    now = timezone.now()
    return {
        "name": name, "status": Experiment.Status.FINISHED, "started_at": now, "finished_at": now,
        "source": Experiment.Source.IMPORTED, "target_model": files[0].model_id[:500] or "unknown",
        "worker_queue": "import", "prompt_set": "", "num_prompts": max(max(p.prompts for p in protocols), 1),
        "max_tokens": max(math.ceil(max(p.output_tokens for p in protocols)), 1),
        "request_rate": import_protocol.request_rate(files), "concurrency_levels": sorted({f.level for f in files}),
        "repetitions": max(per_cell.values()), "server_per_block": False, "warmup_requests": 0,
        "imported_files": [_file_entry(arm, file) for arm in arms for file in arm.files],
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
            analysis = experiment_analyse(experiment=experiment)
            import_estimates.summary_estimates_add(experiment=experiment, analysis=analysis)
    except Exception:
        # As for a measured experiment: the summaries still show, without speedups.
        logger.exception("analysis of imported experiment %s failed", experiment.id)
    return experiment
