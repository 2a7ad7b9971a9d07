"""The vLLM server a run measures: a session's launch (launch.py), the command line (command.py),
the process group (vllm_server.py) and the ones a killed worker left (orphans.py), CPU placement,
chat template, synthetic acceptance, profiler and the model prefetch beside it. Plain modules: no
Django except launch, which reads the experiment and the worker's settings, and profiling, which
records the profiled intervals."""
