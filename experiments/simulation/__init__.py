"""Experiments with known effects, simulated and pushed through the code the page and the
worker use, to check how often the words are wrong and what a design costs: whole
experiments request by request (`simulator`, decided by `decisions`, counted by `tally`,
printed by `decision_tables`), single cells with a known speedup (`cell_verdicts`) and the
break-even search against a fixed grid (`search`). The command lines are scripts/check_decisions.py,
scripts/check_verdicts.py and scripts/bench_planner.py; the tests are in tests/simulation/.

Free of Django (an import-linter contract), strictly typed, and imported by nothing of the
product: it sits above every layer and reaches down to measurement only.
"""
