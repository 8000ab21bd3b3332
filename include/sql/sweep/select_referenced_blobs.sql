-- Which of the given blob ids are referenced right now, by any discovered foreign key or declared extra reference.
SELECT DISTINCT blob_id FROM ({referenced}) AS r
