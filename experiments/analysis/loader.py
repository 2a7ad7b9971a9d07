"""An experiment's succeeded runs read from PostgreSQL into inference.RunData
(experiments/measurement/stats/inference.py): the input of the stored analysis
(experiments/analysis/services.py), of the worker's decision to add a block
(experiments/analysis/continuation.py) and of the A/A checks. The arithmetic is the inference
code's, which the simulation in scripts/check_verdicts.py calls alike.
"""

from collections import defaultdict
from dataclasses import dataclass

from experiments.measurement.encoding.token_ids import unpack_token_ids
from experiments.measurement.stats import inference
from experiments.models import Block, Experiment, RequestRecord, RunSummary, SpeedupEstimate

Metric = SpeedupEstimate.Metric
REQUEST_COLUMNS = {
    Metric.SERVER_TPOT: "server_tpot_ms",
    Metric.TPOT: "tpot_ms",
    Metric.E2E: "e2e_ms",
    Metric.TTFT: "ttft_ms",
}
RUN_COLUMNS = {
    Metric.OUTPUT_THROUGHPUT: "output_throughput",
    Metric.REQUEST_THROUGHPUT: "request_throughput",
    Metric.GOODPUT: "goodput",
}
# Metrics whose block ratio is computed from the columns above (inference.TAIL_METRICS).
DERIVED_METRICS = (Metric.E2E_P95,)


def analysed_metrics(experiment: Experiment) -> list[str]:
    """The metrics every cell of the experiment is compared on: goodput only with an SLO set."""
    metrics = [*REQUEST_COLUMNS, *DERIVED_METRICS, *RUN_COLUMNS]
    return [str(m) for m in metrics if m != Metric.GOODPUT or experiment.has_slos]


def _request_rows(experiment: Experiment, *, with_outputs: bool):
    columns = ["run_id", "prompt_index", "output_tokens", *REQUEST_COLUMNS.values()]
    if with_outputs:
        columns.append("output_token_ids")
    rows = RequestRecord.objects.succeeded_of(experiment)
    return rows.order_by("run_id", "prompt_index").values_list(*columns)


@dataclass(frozen=True)
class BlockOrder:
    """An experiment dispatched by block (issue 38) is looked at in the order its blocks
    completed, not in their numbers' (a block on a slower host may finish after a later one):
    `places[number]` is a block's place in that order, the blocks still in flight placed after
    the completed ones by number; `closed` the blocks completed (done or failed)."""

    places: dict[int, int]
    closed: frozenset[int]


def block_order(experiment: Experiment) -> BlockOrder | None:
    """The completion order of an experiment dispatched by block; None for one that is not (one
    worker ran its blocks in their numbers' order)."""
    rows = list(Block.objects.filter(experiment_id=experiment.id).values_list("number", "look_order"))
    if not rows:
        return None
    closed = sorted((order, number) for number, order in rows if order is not None)
    in_flight = sorted(number for number, order in rows if order is None)
    places = {number: place for place, (_, number) in enumerate(closed, start=1)}
    places |= {number: place for place, number in enumerate(in_flight, start=len(closed) + 1)}
    return BlockOrder(places, frozenset(number for _, number in closed))


def load_runs(experiment: Experiment) -> list[inference.RunData]:
    """Every succeeded run of the experiment as inference.RunData, in a stable order. On a fleet
    the blocks are numbered in completion order, and the runs of blocks still in flight wait:
    a look is taken when a block completes, over the completed ones (BlockOrder)."""
    order = block_order(experiment)
    with_outputs = experiment.is_greedy
    latencies: defaultdict[int, dict[str, dict[int, float | None]]] = defaultdict(
        lambda: {metric: {} for metric in REQUEST_COLUMNS}
    )
    outputs: defaultdict[int, dict[int, list[int]]] = defaultdict(dict)
    output_tokens: defaultdict[int, dict[int, int]] = defaultdict(dict)
    rows = _request_rows(experiment, with_outputs=with_outputs)
    for run_id, prompt, tokens, *values in rows.iterator(chunk_size=5000):
        output_tokens[run_id][prompt] = tokens
        for metric, value in zip(REQUEST_COLUMNS, values, strict=False):
            latencies[run_id][metric][prompt] = value
        if with_outputs and values[-1] is not None:
            outputs[run_id][prompt] = unpack_token_ids(values[-1])
    summaries = RunSummary.objects.succeeded_of(experiment).order_by("run_id")
    return [
        inference.RunData(
            arm=s.run.arm_id,
            level=s.run.concurrency,
            block=order.places[s.run.repetition] if order else s.run.repetition,
            latencies={str(metric): values for metric, values in latencies[s.run_id].items()},
            throughputs={str(metric): getattr(s, column) for metric, column in RUN_COLUMNS.items()},
            failed=s.failed,
            outputs=outputs[s.run_id],
            stream_flagged=s.stream_flagged,
            output_tokens=output_tokens[s.run_id],
            requests=s.completed + s.failed,
        )
        for s in summaries.select_related("run")
        if order is None or s.run.repetition in order.closed
    ]
