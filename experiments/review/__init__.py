"""The team's review: decisions, history, comparison, notifications and comments."""
