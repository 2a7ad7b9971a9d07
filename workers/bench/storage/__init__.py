"""How fast a finished run's requests are stored: the worker's own call (`ingest`), bulk
request rows for a database as large as years of use (`request_rows`), and what PostgreSQL
itself takes of binary COPY (`copy_ceiling`)."""
