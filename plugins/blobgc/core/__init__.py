"""The GC core: key layouts, the outbox, S3 object operations, runs and reclaim recording, SQL, settings and
connections. It imports nothing above it (collectors, the Airflow layer, the reclaim page) and no application."""
