"""The storage reclaim page: the report (SQL to data), its presentation (SVG and HTML) and its FastAPI app."""
