"""The host a worker runs on: its environment as each run records it, the host check a GPU host
runs before its worker joins, and the demo models the CPU host builds."""
