"""The experiment page: its reads, the results block, step profiles, downloads and its views."""
