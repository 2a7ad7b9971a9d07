"""The load a run sends and what the server's /metrics said meanwhile: the load generator's
per-request records and the Prometheus counters. Plain modules: no Django."""
