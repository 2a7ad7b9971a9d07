"""The analysis at the end of an experiment: speedups, verdicts, breakdowns, capacity and the
acceptance sweep, stored once; and the metric names the other layers read."""
