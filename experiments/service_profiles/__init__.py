"""Service profiles: what a team states about a serving service, and what to run per concurrency band."""
