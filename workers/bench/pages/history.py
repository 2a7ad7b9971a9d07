"""Server time and query count of the history page over 10,000 experiments.

In a database of its own (specdash_bench_history by default, next to the dev database),
migrated and seeded by history_seed.py, it times GETs of the list (Django's test client, in
process: middleware, queries and template) for a few typical URLs and prints the median
server time and the query count of each, the latter for 20 and for 100 rows a page.
`request_rows` adds per-request rows over the succeeded runs, 200 a run
(workers/bench/storage/request_rows.py): the history never reads them, but they make the
database as large as years of use do.
"""

import contextlib
import os
import re
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from experiments.models import Experiment
from workers.bench.pages.history_seed import seed
from workers.bench.storage import request_rows

GETS = 25

Params = dict[str, str | int]


@dataclass(frozen=True)
class Timed:
    """One URL's median wall-clock and CPU (this process) milliseconds, queries and matches."""

    name: str
    wall_ms: float
    cpu_ms: float
    queries: int
    matches: str


def _urls(user: User, total: int) -> dict[str, Params]:
    last_month = (datetime.now(UTC) - timedelta(days=30)).date().isoformat()
    middle = max(1, total // 40)
    return {
        "newest first, page 1": {},
        f"by name, page {middle} (the middle)": {"sort": "name", "page": middle},
        "finished EAGLE-3 on h100": {"status": "finished", "method": "eagle3", "queue": "h100"},
        "vLLM 0.33.0, last month, E2E headline": {"vllm": "0.33.0", "since": last_month, "metric": "e2e"},
        "one owner, search 'qwen'": {"owner": user.username, "q": "qwen"},
        "cited by a final deploy decision": {"decision": "final", "decision_kind": "deploy"},
    }


def _queries(client: Client, url: str, params: Params) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params)
    assert response.status_code == 200, re.findall(r"<li><strong>.*?</li>", response.content.decode())
    return len(captured)


def _time_url(client: Client, url: str, name: str, params: Params, gets: int) -> Timed:
    first_page = {key: value for key, value in params.items() if key != "page"}
    counts = {size: _queries(client, url, first_page | {"per_page": size}) for size in (20, 100)}
    assert counts[20] == counts[100], counts
    times, cpu = [], []
    for _ in range(gets):
        start, start_cpu = time.perf_counter(), time.process_time()
        response = client.get(url, params)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    content = response.content.decode()
    assert response.status_code == 200, re.findall(r"<li><strong>.*?</li>", content)
    found = re.search(r"([\d,]+) experiments?\.", content)
    matches = found.group(1) if found else "0"  # a small seed may have none
    return Timed(name, statistics.median(times), statistics.median(cpu), counts[20], matches)


# The dev settings serve static files from a collectstatic manifest that may not exist yet;
# plain static URLs cost the same.
@override_settings(STORAGES={"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}})
def time_list(gets: int = GETS) -> list[Timed]:
    """Every URL of _urls timed over `gets` GETs.

    The CPU time leaves out PostgreSQL's share but also the wait for a core, which on a
    shared machine can be most of the wall-clock time."""
    user = get_user_model().objects.get(username="engineer03")
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    url = reverse("experiments:list")
    client.get(url)  # the first view of all also records the user's visit (two more queries)
    return [
        _time_url(client, url, name, params, gets) for name, params in _urls(user, Experiment.objects.count()).items()
    ]


@contextlib.contextmanager
def in_database(name: str, *, keep: bool) -> Iterator[None]:
    """The default connection on a migrated database `name` of its own; dropped after unless `keep`
    (and then reused next time)."""
    connection.settings_dict["TEST"]["NAME"] = name
    original = connection.settings_dict["NAME"]
    # serialize=False: the test runner's copy of every row would read all the request rows.
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=keep, serialize=False)
    try:
        yield
    finally:
        if not keep:
            connection.creation.destroy_test_db(original, verbosity=0)


def run(*, experiments: int, request_rows_wanted: int, gets: int) -> None:
    """Seed what the current database lacks, then time the list and print the figures."""
    if not Experiment.objects.exists():
        print(f"seeding {experiments:,} experiments into {connection.settings_dict['NAME']} …", flush=True)
        start = time.perf_counter()
        seed(experiments)
        print(f"seeded in {time.perf_counter() - start:.0f} s", flush=True)
    missing = request_rows_wanted - request_rows.rows_in_table()
    if missing > 0:
        request_rows.report(request_rows.seed_request_rows(missing))
    total, rows = Experiment.objects.count(), request_rows.rows_in_table()
    print(f"history page over {total:,} experiments and {rows:,} request rows, median of {gets} GETs each:")
    results = time_list(gets)
    for r in results:
        print(f"  {r.name:40} {r.wall_ms:6.1f} ms (CPU {r.cpu_ms:5.1f})  {r.queries} queries, 20 or 100 a page  "
              f"{r.matches} match")  # fmt: skip
    print(f"median of the medians: {statistics.median(r.wall_ms for r in results):.1f} ms (target 100 ms)")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
