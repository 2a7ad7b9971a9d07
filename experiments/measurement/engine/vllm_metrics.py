"""The names of vLLM's Prometheus metrics that specdash reads, declared once: the worker's
/metrics parser (experiments/measurement/engine/prom.py) reads them while it measures, and the guardrail
rules (experiments/measurement/deploy/alert_rules.py) select them in production's Prometheus and in
the live check. The speculative-decoding counters carry `engine` and `model_name` labels, the
per-position one also `position` (docs/metrics.md)."""

NUM_DRAFTS = "vllm:spec_decode_num_drafts_total"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# A fraction (1 = the whole cache) despite its name.
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
