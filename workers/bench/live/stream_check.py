"""Does the client see vLLM's stream as the engine makes it? The demo pair run on the real CPU
server the way an experiment does, with the figures of docs/metrics.md ("Stream fidelity").

In each block the baseline and its A/A replicate (and, with `draft`, the draft-model arm)
run on fresh servers in a random order, at every level; every request is checked against
vLLM's own timing by experiments/measurement/engine/stream_fidelity.py, and the A/A
replicate's TPOT interval comes from the same inference code as the experiment page. Per
placement: requests checked, with a stall (a wait longer than 5 engine steps), with their
whole decode in one burst, distorted; the client / engine decode span ratio (median, p5,
p95); the first-token lag (client TTFT − engine queue and TTFT); and the A/A replicate's
TPOT speedup with its interval, client-timed and engine-timed.
"""

import contextlib
import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

from experiments.measurement.engine import stream_fidelity
from experiments.measurement.stats import inference, latency
from workers.bench.live.vllm_bench import load_prompts
from workers.measure.loadgen import LoadResult, RequestResult, run_load_sync
from workers.server import affinity
from workers.server.command import ServerLaunch, build_server_args, free_port
from workers.server.vllm_server import VllmServer

BASELINE, REPLICATE, DRAFT = 0, 1, 2
LABELS = {BASELINE: "baseline", REPLICATE: "A/A replicate", DRAFT: "draft model k=4"}
KV_CACHE_BYTES = 2 * 2**30

Checked = list[tuple[RequestResult, stream_fidelity.StreamCheck]]


@dataclass(frozen=True)
class Options:
    """What scripts/check_stream_fidelity.py asks for (its --help says each)."""

    models: str
    vllm_python: str
    placements: tuple[str, ...] = (affinity.DEFAULT_PLACEMENT,)
    draft: bool = False
    serve: str = "target"
    blocks: int = 3
    levels: tuple[int, ...] = (1, 4)
    num_prompts: int = 16
    warmup: int = 2
    max_tokens: int = 48
    prompt_set: str = "code_edit"
    seed: int = 0
    work_dir: str = "/tmp/specdash-stream-check"
    json: str | None = None


@dataclass(frozen=True)
class MeasuredRun:
    """One run of a session: its arm, level and block, the load and every succeeded request's check."""

    arm: int
    level: int
    block: int
    load: LoadResult
    checks: Checked


def server_args(options: Options, arm: int, port: int) -> list[str]:
    models = Path(options.models)
    speculative: dict[str, object] | None = (
        {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 4} if arm == DRAFT else None
    )
    return build_server_args(
        python=options.vllm_python, model=str(models / options.serve), port=port, dtype="float32", max_model_len=512,
        seed=options.seed, speculative_config=speculative, kv_cache_bytes=KV_CACHE_BYTES,
    )  # fmt: skip


def request_checks(load: LoadResult) -> Checked:
    """Every succeeded request with its stream check (made by the load generator, as in a run)."""
    return [(r, r.stream) for r in load.requests if not r.error]


def run_session(options: Options, placement: str, arm: int, prompts: list[str], block: int) -> list[MeasuredRun]:
    """One fresh server for `arm`, every level on it."""
    binding = affinity.plan_binding(affinity.usable_cores())
    launch = ServerLaunch(
        server_args(options, arm, free_port()),
        log_path=Path(options.work_dir) / f"{placement}-block{block}-arm{arm}.log",
        env=affinity.server_env(binding),
        placement=affinity.ServerPlacement(binding, placement) if binding else None,
    )
    runs = []
    with VllmServer(launch) as server:
        for level in options.levels:
            with affinity.pinned(binding.client_cores) if binding else contextlib.nullcontext():
                load = run_load_sync(
                    base_url=server.base_url, model="target", prompts=prompts, max_tokens=options.max_tokens,
                    temperature=0.0, top_p=1.0, seed=options.seed, ignore_eos=True, concurrency=level,
                    warmup=options.warmup,
                )  # fmt: skip
            runs.append(MeasuredRun(arm, level, block, load, request_checks(load)))
    return runs


def run_data(run: MeasuredRun) -> inference.RunData:
    ok = [r for r in run.load.requests if not r.error]
    return inference.RunData(
        arm=run.arm,
        level=run.level,
        block=run.block,
        latencies={
            "tpot": {r.prompt_index: r.tpot_ms for r in ok},
            "server_tpot": {r.prompt_index: r.server_tpot_ms for r in ok},
            "e2e": {r.prompt_index: r.e2e_ms for r in ok},
        },
        output_tokens={r.prompt_index: r.output_tokens for r in ok},
    )


def pct(values: list[float], q: float) -> str:
    value = latency.percentile(values, q)
    return "-" if value is None else f"{value:.3f}"


def _cell_line(runs: list[MeasuredRun], arm: int, level: int) -> str:
    checked = [(r, c) for run in runs if run.arm == arm and run.level == level for r, c in run.checks]
    done = [c for _, c in checked if c.checked]
    ratios = [c.span_ratio for c in done if c.span_ratio is not None]
    lags = [c.first_token_lag_ms for c in done if c.first_token_lag_ms is not None]
    client = statistics.median(r.tpot_ms for r, _ in checked if r.tpot_ms is not None)
    engine = statistics.median(r.server_tpot_ms for r, _ in checked if r.server_tpot_ms is not None)
    return (
        f"{LABELS[arm]:<18}{level:>6}{len(done):>9}{sum(c.stalled for c in done):>9}"
        f"{sum(c.burst for c in done):>8}{sum(c.distorted for c in done):>11}{pct(ratios, 50):>10}"
        f"{pct(ratios, 5):>8}{pct(ratios, 95):>8}{pct(lags, 50):>12}{client / engine:>10.3f}"
    )


def report(placement: str, runs: list[MeasuredRun], levels: list[int], arms: list[int]) -> None:
    print(f"\n=== placement: {placement} ({affinity.PLACEMENTS[placement]})")
    print(f"{'arm':<18}{'level':>6}{'checked':>9}{'stalled':>9}{'bursts':>8}{'distorted':>11}"
          f"{'span p50':>10}{'p5':>8}{'p95':>8}{'lag p50 ms':>12}{'tpot c/e':>10}")  # fmt: skip
    for arm in arms:
        for level in levels:
            print(_cell_line(runs, arm, level))
    everything = [c for run in runs for _, c in run.checks if c.checked]
    stalled = sum(c.stalled for c in everything)
    spans = [c.span_ratio for c in everything if c.span_ratio is not None]
    print(f"all: {stalled} of {len(everything)} requests stalled ({stalled / len(everything):.1%}); "
          f"median span ratio {pct(spans, 50)}")  # fmt: skip
    cells = inference.speedup_cells(
        [run_data(run) for run in runs], baseline=BASELINE, arms=[a for a in arms if a != BASELINE], levels=levels,
        margin=0.02, metrics=["tpot", "server_tpot", "e2e"],
    )  # fmt: skip
    for cell in cells:
        e = cell.estimate
        interval = f"[{e.lo:.3f}, {e.hi:.3f}]" if e.has_interval else "(no interval)"
        print(f"  {LABELS[cell.arm]} {cell.metric:<12} at {cell.level}: {e.point:.3f} {interval} ({cell.outcome})")


def _dumped(placement: str, runs: list[MeasuredRun]) -> list[dict[str, object]]:
    return [
        {"placement": placement, "arm": run.arm, "level": run.level, "block": run.block,
         "chunk_times_ms": list(r.chunk_times_ms), "server_decode_ms": r.server_decode_ms,
         "server_ttft_ms": r.server_ttft_ms, "server_queue_ms": r.server_queue_ms, "output_tokens": r.output_tokens,
         "span_ratio": c.span_ratio, "longest_wait_steps": c.longest_wait_steps}
        for run in runs for r, c in run.checks
    ]  # fmt: skip


def check(options: Options) -> None:
    """Every placement's blocks on fresh servers, its report, and (with `json`) every request's check."""
    arms = [BASELINE, REPLICATE] + ([DRAFT] if options.draft else [])
    prompts = load_prompts(options.prompt_set, options.warmup + options.num_prompts)
    Path(options.work_dir).mkdir(parents=True, exist_ok=True)
    rng = random.Random(options.seed)
    dump = []
    for placement in options.placements:
        runs = []
        for block in range(1, options.blocks + 1):
            order = arms[:]
            rng.shuffle(order)
            for arm in order:
                print(f"{placement}: block {block}, {LABELS[arm]}", flush=True)
                runs += run_session(options, placement, arm, prompts, block)
        report(placement, runs, list(options.levels), arms)
        dump += _dumped(placement, runs)
    if options.json:
        Path(options.json).write_text(json.dumps(dump))
