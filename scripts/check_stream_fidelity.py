"""Does the client see vLLM's stream as the engine makes it? Runs the demo pair on the real
CPU server the way an experiment does and prints the figures of docs/metrics.md ("Stream
fidelity").

In each block the baseline and its A/A replicate (and, with --draft, the draft-model arm)
run on fresh servers in a random order, at every level; every request is checked against
vLLM's own timing by experiments/measurement/engine/stream_fidelity.py, and the A/A replicate's TPOT interval
comes from the same inference code as the experiment page. Printed per placement: requests
checked, with a stall (a wait longer than 5 engine steps), with their whole decode in one
burst, distorted; the client / engine decode span ratio (median, p5, p95); the first-token
lag (client TTFT − engine queue and TTFT); and the A/A replicate's TPOT speedup with its
interval, client-timed and engine-timed.

    .venv/bin/python scripts/check_stream_fidelity.py [--placement split unbound ...]

Targets on the 2-core machine with nothing else running (issue "Timing that measures the
arms"): under 2 % of requests stalled, the median span ratio within 10 % of 1, the A/A
replicate's client TPOT interval within ±10 % of 1 at concurrency 1.
"""

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from experiments.measurement.engine import stream_fidelity  # noqa: E402
from experiments.measurement.stats import inference, latency  # noqa: E402
from workers.measure.loadgen import run_load_sync  # noqa: E402
from workers.server import affinity  # noqa: E402
from workers.server.command import ServerLaunch, build_server_args, free_port  # noqa: E402
from workers.server.vllm_server import VllmServer  # noqa: E402

BASELINE, REPLICATE, DRAFT = 0, 1, 2
LABELS = {BASELINE: "baseline", REPLICATE: "A/A replicate", DRAFT: "draft model k=4"}
KV_CACHE_BYTES = 2 * 2**30


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=str(REPO / ".specdash" / "models"), help="the demo models' folder")
    parser.add_argument(
        "--placement", nargs="+", default=[affinity.DEFAULT_PLACEMENT], choices=sorted(affinity.PLACEMENTS)
    )
    parser.add_argument("--draft", action="store_true", help="also run the draft model arm (k=4)")
    parser.add_argument(
        "--serve", default="target", choices=("target", "draft"),
        help="the model the baseline serves: 'draft' serves the 1-layer draft alone, the fastest engine",
    )  # fmt: skip
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--prompt-set", default="code_edit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--work-dir", default="/tmp/specdash-stream-check")
    parser.add_argument("--json", help="also write every request's check to this file")
    return parser.parse_args(argv)


def load_prompts(name: str, count: int) -> list[str]:
    prompts = json.loads((REPO / "experiments" / "prompt_sets" / f"{name}.json").read_text())["prompts"]
    return [prompts[i % len(prompts)] for i in range(count)]


def server_args(args, arm: int, port: int) -> list[str]:
    models = Path(args.models)
    speculative = (
        {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 4} if arm == DRAFT else None
    )
    return build_server_args(
        python=args.vllm_python, model=str(models / args.serve), port=port, dtype="float32", max_model_len=512,
        seed=args.seed, speculative_config=speculative, kv_cache_bytes=KV_CACHE_BYTES,
    )  # fmt: skip


def request_checks(load) -> list[tuple[object, stream_fidelity.StreamCheck]]:
    """Every succeeded request with its stream check (made by the load generator, as in a run)."""
    return [(r, r.stream) for r in load.requests if not r.error]


def run_session(args, placement: str, arm: int, levels: list[int], prompts: list[str], block: int) -> list[dict]:
    """One fresh server for `arm`, every level on it; one dict per run."""
    binding = affinity.plan_binding(affinity.usable_cores())
    work = Path(args.work_dir)
    command = server_args(args, arm, free_port())
    launch = ServerLaunch(
        command,
        log_path=work / f"{placement}-block{block}-arm{arm}.log",
        env=affinity.server_env(binding),
        placement=affinity.ServerPlacement(binding, placement) if binding else None,
    )
    server = VllmServer(launch)
    runs = []
    with server:
        for level in levels:
            with affinity.pinned(binding.client_cores) if binding else _nothing():
                load = run_load_sync(
                    base_url=server.base_url, model="target", prompts=prompts, max_tokens=args.max_tokens,
                    temperature=0.0, top_p=1.0, seed=args.seed, ignore_eos=True, concurrency=level,
                    warmup=args.warmup,
                )  # fmt: skip
            runs.append({"arm": arm, "level": level, "block": block, "load": load, "checks": request_checks(load)})
    return runs


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run_data(run: dict) -> inference.RunData:
    ok = [r for r in run["load"].requests if not r.error]
    return inference.RunData(
        arm=run["arm"],
        level=run["level"],
        block=run["block"],
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


def report(placement: str, runs: list[dict], levels: list[int], arms: list[int]) -> None:
    print(f"\n=== placement: {placement} ({affinity.PLACEMENTS[placement]})")
    print(f"{'arm':<18}{'level':>6}{'checked':>9}{'stalled':>9}{'bursts':>8}{'distorted':>11}"
          f"{'span p50':>10}{'p5':>8}{'p95':>8}{'lag p50 ms':>12}{'tpot c/e':>10}")  # fmt: skip
    for arm in arms:
        for level in levels:
            checks = [c for run in runs if run["arm"] == arm and run["level"] == level for _, c in run["checks"]]
            done = [c for c in checks if c.checked]
            ratios = [c.span_ratio for c in done]
            lags = [c.first_token_lag_ms for c in done if c.first_token_lag_ms is not None]
            requests = [r for run in runs if run["arm"] == arm and run["level"] == level for r, _ in run["checks"]]
            client = statistics.median(r.tpot_ms for r in requests if r.tpot_ms is not None)
            engine = statistics.median(r.server_tpot_ms for r in requests if r.server_tpot_ms is not None)
            print(
                f"{LABELS[arm]:<18}{level:>6}{len(done):>9}{sum(c.stalled for c in done):>9}"
                f"{sum(c.burst for c in done):>8}{sum(c.distorted for c in done):>11}{pct(ratios, 50):>10}"
                f"{pct(ratios, 5):>8}{pct(ratios, 95):>8}{pct(lags, 50):>12}{client / engine:>10.3f}"
            )
    everything = [c for run in runs for _, c in run["checks"] if c.checked]
    stalled = sum(c.stalled for c in everything)
    print(f"all: {stalled} of {len(everything)} requests stalled ({stalled / len(everything):.1%}); "
          f"median span ratio {pct([c.span_ratio for c in everything], 50)}")  # fmt: skip
    cells = inference.speedup_cells(
        [run_data(run) for run in runs], baseline=BASELINE, arms=[a for a in arms if a != BASELINE], levels=levels,
        margin=0.02, metrics=["tpot", "server_tpot", "e2e"],
    )  # fmt: skip
    for cell in cells:
        e = cell.estimate
        interval = f"[{e.lo:.3f}, {e.hi:.3f}]" if e.has_interval else "(no interval)"
        print(f"  {LABELS[cell.arm]} {cell.metric:<12} at {cell.level}: {e.point:.3f} {interval} ({cell.outcome})")


def main(argv=None) -> None:
    args = parse_args(argv)
    levels = [int(level) for level in args.levels.split(",")]
    arms = [BASELINE, REPLICATE] + ([DRAFT] if args.draft else [])
    prompts = load_prompts(args.prompt_set, args.warmup + args.num_prompts)
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    dump = []
    for placement in args.placement:
        runs = []
        for block in range(1, args.blocks + 1):
            order = arms[:]
            rng.shuffle(order)
            for arm in order:
                print(f"{placement}: block {block}, {LABELS[arm]}", flush=True)
                runs += run_session(args, placement, arm, levels, prompts, block)
        report(placement, runs, levels, arms)
        dump += [
            {"placement": placement, "arm": run["arm"], "level": run["level"], "block": run["block"],
             "chunk_times_ms": list(r.chunk_times_ms), "server_decode_ms": r.server_decode_ms,
             "server_ttft_ms": r.server_ttft_ms, "server_queue_ms": r.server_queue_ms, "output_tokens": r.output_tokens,
             "span_ratio": c.span_ratio, "longest_wait_steps": c.longest_wait_steps}
            for run in runs for r, c in run["checks"]
        ]  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(dump))


if __name__ == "__main__":
    main()
