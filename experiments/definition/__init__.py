"""Defining an experiment: its forms and cross-field rules, prefill for re-run and clone, creation,
and the views that create, clone, re-run and cancel."""
