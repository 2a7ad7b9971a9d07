"""The load a run sends and what the server's /metrics said meanwhile: the load generator's
per-request records, with the counters and capacity figures read by measurement's /metrics
parser (experiments/measurement/engine/prom.py). Plain modules: no Django."""
