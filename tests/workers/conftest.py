"""Fixtures for the worker's tests."""

from tests.workers.fakes import served  # noqa: F401 (the fake server and load generator, for every test here)
