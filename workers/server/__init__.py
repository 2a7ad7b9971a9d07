"""The vLLM server a run measures: its command and process group, CPU placement, chat
template, synthetic acceptance, profiler and the model prefetch beside it. Plain modules: no Django
except profiling, which records the profiled intervals."""
