"""What the results tests share: two arms with run summaries made by hand, and the experiment
page's tables and downloads as a test reads them."""

from html.parser import HTMLParser

from django.urls import reverse

from experiments.models import Experiment, Run, RunSummary
from tests.factories import (
    ArmFactory,
    ExperimentFactory,
    RunFactory,
    RunSummaryFactory,
)

DOWNLOADS = ["summaries_csv", "summaries_json", "requests_csv", "requests_json"]


def two_arms(**fields) -> tuple[Experiment, object, object]:
    experiment = ExperimentFactory(concurrency_levels=[1, 4], repetitions=2, **fields)
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    arm = ArmFactory(experiment=experiment, position=1, label="n-gram k=4")
    return experiment, baseline, arm


def run_summary(arm, level, repetition, status=Run.Status.SUCCEEDED, **fields) -> RunSummary:
    run = RunFactory(arm=arm, concurrency=level, repetition=repetition, status=status)
    return RunSummaryFactory(run=run, **fields)


class _Tables(HTMLParser):
    """The rows of every <table id=…> as lists of each cell's data-value (or its text)."""

    def __init__(self):
        super().__init__()
        self.tables, self._table, self._cell = {}, None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id"):
            self._table = self.tables.setdefault(attrs["id"], [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = [attrs.get("data-value"), ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            value, text = self._cell
            self._table[-1].append(value if value is not None else text.strip())
            self._cell = None
        elif tag == "table":
            self._table = None


def html_tables(html: str) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(html)
    return parser.tables


def page_html(client, experiment):
    response = client.get(reverse("experiments:detail", args=[experiment.pk]))
    assert response.status_code == 200
    return response.text


def download(client, experiment, name):
    response = client.get(reverse(f"experiments:{name}", args=[experiment.pk]))
    assert response.status_code == 200
    return response, b"".join(response.streaming_content).decode()
