# The Airflow image blobgc runs on in docker-compose.yaml: the official image plus the few
# libraries the official image lacks (psycopg 3 for blobgc's own SQL, Pillow for images).
FROM apache/airflow:3.3.2-python3.11
COPY docker/requirements-image.txt /requirements-image.txt
RUN pip install --no-cache-dir -r /requirements-image.txt
