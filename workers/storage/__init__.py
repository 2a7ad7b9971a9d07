"""A measured run on its way into PostgreSQL: spooled to disk first, then ingested with the
binary COPY of its request rows, once."""
