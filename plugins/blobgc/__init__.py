"""blobgc: garbage collection of user-uploaded media across PostgreSQL, S3 and Redis.

The core functions take a psycopg connection, a boto3 S3 client or a Redis client plus plain
values, so the DAGs, the tests and the benchmarks call the same code. `blobgc.airflow_adapters`
is the only module that knows about Airflow.
"""
