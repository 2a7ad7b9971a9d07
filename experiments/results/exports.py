"""Downloads of an experiment's measurements: run summaries and per-request rows, as CSV or
JSON, streamed (an experiment can hold hundreds of thousands of requests)."""

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import QuerySet

from experiments.measurement.encoding.token_ids import unpack_token_ids
from experiments.models import Experiment, RequestRecord, RunSummary

# Columns that say which cell a row belongs to, then every column of the row's table.
EXPORT_RUN_COLUMNS = {
    "run_id": "run_id",
    "arm": "run__arm__label",
    "method": "run__arm__method",
    "concurrency": "run__concurrency",
    "repetition": "run__repetition",
    # Set on the runs of a synthetic acceptance sweep, which are not measurements of the arm.
    "synthetic_acceptance_length": "run__synthetic_acceptance_length",
}
SUMMARY_EXPORT_FIELDS = tuple(f.name for f in RunSummary._meta.concrete_fields if f.name not in ("id", "run"))
REQUEST_EXPORT_FIELDS = tuple(f.name for f in RequestRecord._meta.concrete_fields if f.name not in ("id", "run"))
EXPORT_ORDER = ("run__arm__position", "run__concurrency", "run__repetition")


@dataclass(frozen=True)
class Export:
    columns: tuple[str, ...]
    rows: QuerySet  # values_list in the order of `columns`


def run_summary_export(*, experiment: Experiment) -> Export:
    """One row per run that has a summary, with its arm, level and repetition."""
    columns = (*EXPORT_RUN_COLUMNS, "run_status", *SUMMARY_EXPORT_FIELDS)
    rows = (
        RunSummary.objects.filter(run__experiment=experiment)
        .order_by(*EXPORT_ORDER)
        .values_list(*EXPORT_RUN_COLUMNS.values(), "run__status", *SUMMARY_EXPORT_FIELDS)
    )
    return Export(columns, rows)


def request_export(*, experiment: Experiment) -> Export:
    """One row per measured request, with its run's arm, level and repetition; iterate it with .iterator()."""
    columns = (*EXPORT_RUN_COLUMNS, *REQUEST_EXPORT_FIELDS)
    rows = (
        RequestRecord.objects.filter(run__experiment=experiment)
        .order_by(*EXPORT_ORDER, "prompt_index")
        .values_list(*EXPORT_RUN_COLUMNS.values(), *REQUEST_EXPORT_FIELDS)
    )
    return Export(columns, rows)


EXPORTS = {"summaries": run_summary_export, "requests": request_export}
EXPORT_CHUNK_ROWS = 2000


class _Echo:
    """The file-like object csv.writer needs to hand back each formatted line."""

    def write(self, line: str) -> str:
        return line


def _plain(value):
    """A stored value as the downloads give it: packed token ids as a list of ids."""
    return unpack_token_ids(value) if isinstance(value, bytes | memoryview) else value


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV injection").
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """Text that a spreadsheet would run as a formula (an arm labelled =HYPERLINK(...)),
    quoted so that it is shown as typed. Numbers stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def _csv_cell(value):
    return json.dumps(value) if isinstance(value, list) else spreadsheet_safe(value)


def csv_lines(export: Export) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(export.columns)
    for row in export.rows.iterator(chunk_size=EXPORT_CHUNK_ROWS):
        yield writer.writerow([_csv_cell(_plain(value)) for value in row])


def row_dict(columns: tuple[str, ...], row) -> dict:
    """One export row as the JSON download (and the API) gives it."""
    return dict(zip(columns, map(_plain, row), strict=True))


def json_lines(export: Export) -> Iterator[str]:
    separator = "[\n"
    for row in export.rows.iterator(chunk_size=EXPORT_CHUNK_ROWS):
        yield separator + json.dumps(row_dict(export.columns, row))
        separator = ",\n"
    yield "[]\n" if separator == "[\n" else "\n]\n"


FORMATS = {"csv": ("text/csv; charset=utf-8", csv_lines), "json": ("application/json", json_lines)}
