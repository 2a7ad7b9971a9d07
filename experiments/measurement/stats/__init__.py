"""Statistics for comparing a speculative arm with the baseline: latency summaries
(`latency`), acceptance arithmetic (`acceptance`), speedups per block and their intervals
(`intervals`), the break-even concurrency (`break_even`), output fidelity (`output_fidelity`),
the inference from recorded runs (`inference`), verdicts and the decisions on an experiment's
question (`verdicts`, `sequential`, `question`), variance components (`variance_components`)
and the differences that make experiments unlike (`differences`). Metric definitions:
docs/metrics.md; the design: docs/verdicts.md."""
