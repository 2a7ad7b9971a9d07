"""The REST API (Django REST framework, schema by drf-spectacular): submit, follow, cancel and
read experiments with a per-user token. Its rules are the experiment form's own
(submission.py), its numbers those of the experiment page (payloads.py)."""
