"""Measurement without Django: statistics, verdicts, step accounting, schedules, stream checks and
the packing of recorded numbers. The mutation check's target; strictly type-checked."""
