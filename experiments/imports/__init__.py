"""Import of `vllm bench serve` result files as read-only experiments."""
