"""Measurement without Django, in five families: statistics (`stats/`: summaries, acceptance,
intervals, verdicts, decisions), what the engine did (`engine/`: step accounting, profiles,
stream checks, vLLM's metrics), planning and cost (`planning/`: schedules, the break-even search,
device-minutes, limits), what to deploy (`deploy/`: recommendations, batch-size schedules,
guardrails) and the encoding of recorded numbers (`encoding/`). The mutation check's target;
strictly type-checked."""
