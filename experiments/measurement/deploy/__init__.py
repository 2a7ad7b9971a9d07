"""What to deploy: the recommendation per measured level (`recommendation`) and per band of a
service's load (`service_bands`), vLLM's batch-size schedules of k (`batch_schedule`), and a
deploy decision's guardrails (`guardrails`) written as Prometheus alerting rules
(`alert_rules`)."""
