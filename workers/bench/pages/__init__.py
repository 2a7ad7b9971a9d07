"""Server time of the pages at a realistic size: the experiment page over one large finished
experiment stored through the worker's ingestion (`experiment_page`), the history over 10,000
experiments seeded with COPY (`history_seed`, timed by `history`)."""
