"""How long a profiled interval's trace takes to summarise, and in how much memory: the streamed
reader against json.load of the whole file, on a generated trace in the shape vLLM's torch
profiler writes on a GPU host (workers/bench/trace_read.py).

    .venv/bin/python -m scripts.bench_trace_read [--mb 500] [--gzip] [--kernels 60]

An on-demand check, not a test: the figures are printed, never asserted.
"""

import argparse

from workers.bench import trace_read


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=500.0, help="size of the trace's JSON, in MB")
    parser.add_argument("--gzip", action="store_true", help="write and read it gzipped, as vLLM does by default")
    parser.add_argument("--kernels", type=int, default=60, help="kernels per engine step")
    args = parser.parse_args(argv)
    trace_read.compare(mb=args.mb, gzipped=args.gzip, kernels=args.kernels)


if __name__ == "__main__":
    main()
