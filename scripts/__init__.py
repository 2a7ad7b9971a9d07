"""Command lines for the benchmarks and checks run on demand, from the checkout's root:
`.venv/bin/python -m scripts.NAME --help` says what each takes. Each only parses its
arguments and calls the code that does the work (experiments/simulation/, workers/bench/);
the ones that read the database set Django up after parsing. Nothing imports them."""
