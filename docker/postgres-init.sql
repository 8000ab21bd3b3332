-- First start of the compose PostgreSQL: the application database blobgc works on, beside Airflow's.
CREATE USER blobgc WITH PASSWORD 'blobgc';
CREATE DATABASE blobgc OWNER blobgc;
