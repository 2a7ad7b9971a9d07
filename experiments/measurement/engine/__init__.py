"""What the engine did and what it cost: step accounting (`steps`), the predicted speedup
from acceptance and a measured draft cost (`prediction`), where a step's time goes in a
profiler trace (`trace_shares`), whether the client saw the stream as the engine made it
(`stream_fidelity`), the capacity figures of an interval (`capacity`), the names of vLLM's
metrics (`vllm_metrics`) and the parser of its /metrics page (`prom`), which the worker measures
with and the guardrail check reads a live server with."""
