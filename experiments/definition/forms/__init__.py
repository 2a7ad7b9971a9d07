"""The experiment form, in the parts a user fills in: the experiment (experiment.py: its name,
load, SLOs and the rules across the parts), the target model and its server (server.py), the
workload (workload.py), the question and design (question.py), the service's objective
(objective.py) and the speculative arms (arms.py); the field builders they share (fields.py)."""
