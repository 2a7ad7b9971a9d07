"""Faults played against a whole stack of real processes (scripts/fault_injection.py; the
outcomes are in docs/faults.md): PostgreSQL, Redis, the experiment and control workers and
gunicorn of the exported commit, in a folder of their own (`stack`); what the scenarios share
(`outcomes`, `browser`); the scenarios that stop or starve a process (`process_faults`) and those
that take a service away or repeat a message (`service_faults`); the harness that plays them
(`play`, run inside the exported source, so that every line played was committed)."""
