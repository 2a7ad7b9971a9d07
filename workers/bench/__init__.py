"""The benchmarks and checks of the worker side, run on demand from scripts/ and kept from
rotting by tests/workers/bench/: storing requests (`storage`), the pages over a seeded database
(`pages`), a live vLLM server against vLLM's own client and clock (`live`), faults played
against a whole stack of real processes (`faults`), where an experiment's wall time went
(`efficiency`), reading a profiler trace (`trace_read`), and the simulated streamed requests
they store (`requests`). Nothing of the product imports them (an import-linter contract).
"""
