"""specdash's load generator against vLLM's own (`vllm bench serve`).

One vLLM server, warmed up, then driven with workers.measure.loadgen and with
vllm.benchmarks.serve in alternating order (same prompts, same request body, same
concurrency, same warm-up count); for each: output throughput, TTFT, TPOT, end-to-end
latency, acceptance length, the client's CPU seconds per 1,000 output tokens, and the ratio
ours / theirs. vLLM's own TTFT and E2E histograms (from /metrics, over the same interval) are
printed beside the clients' figures: the server's view does not depend on the client, so
"client − server" is each client's own overhead, which stays comparable when other work on
the host makes the server's speed drift between runs.

The server starts as an experiment's does (workers/server/launch.py): the KV cache sized with
--kv-cache-memory-bytes on a host without a GPU, the engine's threads and the API server and
engine core placed as workers/server/affinity.py places them, and both clients run on the
client's core. Each round also counts the requests of each client that waited longer than 5
of the engine's steps for a chunk (a stall) and those that received their decode in one burst
(a decode span under a fifth of the engine's mean decode time per request), the engine's
figures taken from /metrics over the same requests (server_metrics.py).
"""

import contextlib
import itertools
import json
import resource
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from workers.bench.live.server_metrics import server_histograms, server_means_ms, stream_counts
from workers.bench.live.vllm_bench import SERVED_NAME, VLLM_BENCH_RUNNER, load_prompts, write_sharegpt
from workers.host.envinfo import cuda_visible
from workers.measure.loadgen import LoadResult, run_load_sync
from workers.server import affinity
from workers.server.command import ServerLaunch, build_server_args, free_port
from workers.server.vllm_server import VllmServer

KV_CACHE_BYTES = 2 * 2**30
METRICS = [  # (label, key in a figures dict, format)
    ("output throughput (tok/s)", "output_throughput", "{:.1f}"),
    ("median TTFT (ms)", "median_ttft_ms", "{:.1f}"),
    ("mean TTFT (ms)", "mean_ttft_ms", "{:.1f}"),
    ("  server's mean TTFT, same requests (ms)", "server_ttft_ms", "{:.1f}"),
    ("  client - server mean TTFT (ms)", "ttft_overhead_ms", "{:.1f}"),
    ("median TPOT (ms)", "median_tpot_ms", "{:.2f}"),
    ("mean E2E (ms)", "mean_e2e_ms", "{:.1f}"),
    ("  server's mean E2E, same requests (ms)", "server_e2e_ms", "{:.1f}"),
    ("  client - server mean E2E (ms)", "e2e_overhead_ms", "{:.1f}"),
    ("acceptance length (/metrics)", "acceptance_length", "{:.3f}"),
    ("client CPU s / 1k out tok, load phase", "cpu_per_1k", "{:.3f}"),
    ("client CPU s / 1k out tok, whole process", "cpu_per_1k_process", "{:.3f}"),
    ("requests with a stall (> 5 engine steps)", "stalled", "{:.0f}"),
    ("requests whose decode came in one burst", "bursts", "{:.0f}"),
]

Figures = dict[str, float | None]


@dataclass(frozen=True)
class Options:
    """What scripts/bench_loadgen.py asks for (its --help says each)."""

    model: str
    vllm_python: str
    draft: str | None = None
    ngram: bool = False
    k: int = 4
    prompt_set: str = "chat"
    num_prompts: int = 48
    warmup: int = 0
    concurrency: int = 4
    max_tokens: int = 64
    rounds: int = 6
    dtype: str = "float32"
    max_model_len: int = 512
    ports: str = "18770-18779"
    work_dir: str = "/tmp/specdash-bench"
    placement: str = affinity.DEFAULT_PLACEMENT
    wait_for_model: float = 0.0


def speculative_config(options: Options) -> dict[str, object] | None:
    if options.ngram:
        k = options.k
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    if options.draft:
        return {"method": "draft_model", "model": options.draft, "num_speculative_tokens": options.k}
    return None


def wait_for_model(model: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not (Path(model) / "config.json").exists():
        if time.monotonic() >= deadline:
            raise SystemExit(f"{model}/config.json does not exist")
        time.sleep(10)


def with_overheads(figures: Figures) -> Figures:
    for name in ("ttft", "e2e"):
        client, server = figures[f"mean_{name}_ms"], figures[f"server_{name}_ms"]
        figures[f"{name}_overhead_ms"] = client - server if client is not None and server is not None else None
    return figures


def load_ours(base_url: str, prompts: list[str], options: Options, warmup: int) -> LoadResult:
    return run_load_sync(
        base_url=base_url, model=SERVED_NAME, prompts=prompts, max_tokens=options.max_tokens, temperature=0.0,
        top_p=1.0, seed=0, ignore_eos=True, concurrency=options.concurrency, warmup=warmup,
    )  # fmt: skip


def run_ours(base_url: str, prompts: list[str], options: Options) -> Figures:
    server_before = server_histograms(base_url)
    start_cpu = time.process_time()
    load = load_ours(base_url, prompts, options, options.warmup)
    cpu_s = time.process_time() - start_cpu
    server = server_means_ms(server_before, server_histograms(base_url))
    spec = load.spec_counters
    done = [r for r in load.requests if not r.error]
    gaps = [max((b - a for a, b in itertools.pairwise(r.chunk_times_ms)), default=0.0) for r in done]
    spans = [r.chunk_times_ms[-1] - r.chunk_times_ms[0] for r in done]
    output_tokens = sum(r.output_tokens for r in done)
    return with_overheads({
        "failed": len(load.requests) - len(done),
        "output_throughput": output_tokens / load.duration_s,
        "median_ttft_ms": statistics.median(r.ttft_ms for r in done if r.ttft_ms is not None),
        "mean_ttft_ms": statistics.mean(r.ttft_ms for r in done if r.ttft_ms is not None),
        "median_tpot_ms": statistics.median(r.tpot_ms for r in done if r.tpot_ms is not None),
        "mean_e2e_ms": statistics.mean(r.e2e_ms for r in done if r.e2e_ms is not None),
        **server,
        "acceptance_length": 1 + spec.num_accepted_tokens / spec.num_drafts if spec and spec.num_drafts else None,
        "cpu_per_1k": cpu_s / output_tokens * 1000,
        "cpu_per_1k_process": None,
        "tokens_per_chunk": output_tokens / sum(len(r.chunk_tokens) for r in done),
        **stream_counts(spans, gaps, server),
    })  # fmt: skip


def vllm_bench_command(base_url: str, dataset: Path, options: Options, work: Path, round_no: int) -> list[str]:
    # The same request body as ours: seed and token ids on every request.
    extra_body = json.dumps({"seed": 0, "top_p": 1.0, "return_token_ids": True})
    return [
        options.vllm_python, "-c", VLLM_BENCH_RUNNER, str(work / f"vllm_bench_cpu_{round_no}.txt"),
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", options.model, "--served-model-name", SERVED_NAME, "--tokenizer", options.model,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--num-prompts", str(options.num_prompts), "--sharegpt-output-len", str(options.max_tokens),
        "--num-warmups", str(options.warmup), "--max-concurrency", str(options.concurrency),
        "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--extra-body", extra_body,
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm", "--save-result", "--save-detailed",
        "--result-dir", str(work), "--result-filename", f"vllm_bench_{round_no}.json",
    ]  # fmt: skip


def run_theirs(base_url: str, prompts: list[str], options: Options, work: Path, round_no: int) -> Figures:
    dataset = work / "prompts.json"
    write_sharegpt(dataset, prompts[options.warmup :])
    server_before = server_histograms(base_url)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(work / f"vllm_bench_{round_no}.log", "wb") as log:
        command = vllm_bench_command(base_url, dataset, options, work, round_no)
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = server_means_ms(server_before, server_histograms(base_url))
    process_cpu_s = sum(getattr(children_after, f) - getattr(children_before, f) for f in ("ru_utime", "ru_stime"))
    result = json.loads((work / f"vllm_bench_{round_no}.json").read_text())
    if result["completed"] + result["failed"] != options.num_prompts:
        sent = result["completed"] + result["failed"]
        raise SystemExit(f"vllm bench sent {sent} requests, not {options.num_prompts}")
    output_tokens = result["total_output_tokens"]
    itls = [itl for itl in result["itls"] if itl is not None]  # per request, s between chunks (--save-detailed)
    gaps_ms = [max(request, default=0.0) * 1000 for request in itls]
    spans_ms = [sum(request) * 1000 for request in itls]
    return with_overheads({
        "failed": result["failed"],
        "output_throughput": result["output_throughput"],
        "median_ttft_ms": result["median_ttft_ms"],
        "mean_ttft_ms": result["mean_ttft_ms"],
        "median_tpot_ms": result["median_tpot_ms"],
        "mean_e2e_ms": result["mean_e2el_ms"],
        **server,
        "acceptance_length": result.get("spec_decode_acceptance_length"),
        "cpu_per_1k": float((work / f"vllm_bench_cpu_{round_no}.txt").read_text()) / output_tokens * 1000,
        "cpu_per_1k_process": process_cpu_s / output_tokens * 1000,
        **stream_counts(spans_ms, gaps_ms, server),
    })  # fmt: skip


def fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def print_table(title: str, ours: Figures, theirs: Figures, spreads: dict[str, str] | None = None) -> None:
    print(f"\n{title}")
    spread_header = f"{'per-round ratios':>20}" if spreads else ""
    print(f"{'metric':<44}{'ours':>12}{'vllm bench':>12}{'ours/theirs':>13}{spread_header}")
    for label, key, pattern in METRICS:
        a, b = ours.get(key), theirs.get(key)
        spread = f"{spreads[key]:>20}" if spreads else ""
        print(f"{label:<44}{fmt(a, pattern):>12}{fmt(b, pattern):>12}{fmt(ratio(a, b), '{:.3f}'):>13}{spread}")
    print(f"failed requests: ours {ours['failed']:.0f}, theirs {theirs['failed']:.0f}; "
          f"ours' tokens per chunk: {ours['tokens_per_chunk']:.2f}", flush=True)  # fmt: skip


def median_figures(runs: list[Figures]) -> Figures:
    keys = {key for run in runs for key, value in run.items() if value is not None}
    return {key: statistics.median(value for run in runs if (value := run.get(key)) is not None) for key in keys}


def ratio_spreads(ours_runs: list[Figures], theirs_runs: list[Figures]) -> dict[str, str]:
    spreads = {}
    for _, key, _ in METRICS:
        pairs = zip(ours_runs, theirs_runs, strict=True)
        ratios = [r for r in (ratio(a.get(key), b.get(key)) for a, b in pairs) if r is not None]
        spreads[key] = f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "-"
    return spreads


def run_rounds(base_url: str, prompts: list[str], options: Options, work: Path) -> tuple[list[Figures], list[Figures]]:
    ours_runs, theirs_runs = [], []
    for round_no in range(options.rounds):
        order = ["ours", "theirs"] if round_no % 2 == 0 else ["theirs", "ours"]
        for who in order:
            if who == "ours":
                ours_runs.append(run_ours(base_url, prompts, options))
            else:
                theirs_runs.append(run_theirs(base_url, prompts, options, work, round_no))
        print_table(f"round {round_no + 1} ({' then '.join(order)})", ours_runs[-1], theirs_runs[-1])
    return ours_runs, theirs_runs


def _launch(options: Options, work: Path) -> tuple[ServerLaunch, affinity.CpuBinding | None]:
    low, high = map(int, options.ports.split("-"))
    cpu = not cuda_visible()
    server_args = build_server_args(
        python=options.vllm_python, model=options.model, port=free_port(range(low, high + 1)), dtype=options.dtype,
        max_model_len=options.max_model_len, seed=0, speculative_config=speculative_config(options),
        served_model_name=SERVED_NAME, kv_cache_bytes=KV_CACHE_BYTES if cpu else None,
    )  # fmt: skip
    binding = affinity.plan_binding(affinity.usable_cores()) if cpu else None
    print("server:", " ".join(server_args[1:]), flush=True)
    launch = ServerLaunch(
        server_args, log_path=work / "server.log", start_timeout_s=600, env=affinity.server_env(binding) if cpu else {},
        placement=affinity.ServerPlacement(binding, options.placement) if binding else None,
    )  # fmt: skip
    return launch, binding


def compare(options: Options) -> None:
    """Start the server, run the rounds, print each round's table and the medians over them."""
    wait_for_model(options.model, options.wait_for_model)
    work = Path(options.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    launch, binding = _launch(options, work)
    prompts = load_prompts(options.prompt_set, options.warmup + options.num_prompts)
    server = VllmServer(launch)
    with server, affinity.pinned(binding.client_cores) if binding else contextlib.nullcontext():
        print(f"placement: {server.placed or 'none (GPU host or one core)'}", flush=True)
        load_ours(server.base_url, prompts[: 2 * options.concurrency], options, warmup=0)  # the first are slow
        ours_runs, theirs_runs = run_rounds(server.base_url, prompts, options, work)
    print_table(
        f"median over {options.rounds} rounds",
        median_figures(ours_runs),
        median_figures(theirs_runs),
        ratio_spreads(ours_runs, theirs_runs),
    )
