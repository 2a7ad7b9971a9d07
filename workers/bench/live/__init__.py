"""Benchmarks and checks against a live vLLM server, with vLLM's own client and clock as the
references: our load generator against `vllm bench serve` (`loadgen_compare`, reading vLLM's
histograms with `server_metrics`), the client's view of the stream against the engine's
(`stream_check`), the demo draft model's acceptance by position (`demo_acceptance`), and the
`vllm bench serve` result files the import's tests keep (`bench_fixtures`)."""
