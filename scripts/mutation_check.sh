#!/usr/bin/env bash
# Mutation check of the statistics, schedule, verdict, prediction, step-accounting, profile,
# sweep and decision code (settings in pyproject.toml, [tool.mutmut]): mutmut makes small changes
# to experiments/measurement/ (the statistics of stats/, the engine's prediction, steps and
# trace shares, the planning's schedule, planner and device cost, deploy/batch_schedule.py) and
# experiments/analysis/acceptance_sweep.py, and runs their tests against each; a surviving mutant is a change no test notices. Prints the
# survivors; `mutmut show NAME` shows one. Over an hour on a loaded 2-core host: the decision
# code's mutants also run the database tests of tests/analysis/ (docs/verdicts.md, "Mutation check").
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(./dev env)"
export DJANGO_SETTINGS_MODULE=specdash.settings_test
rm -rf mutants
.venv/bin/mutmut run >/dev/null || true
.venv/bin/mutmut results
