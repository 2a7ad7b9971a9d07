"""What an experiment runs and what it costs: the randomised block schedule (`schedule`), the
break-even search's grid and next levels (`planner`), device-minutes and a plan's estimate
(`device_cost`), and how long a run may take (`limits`)."""
