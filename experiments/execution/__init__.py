"""Runs on their way through the workers: dispatch to the broker, leases, worker queues and the run
state machine's writes."""
