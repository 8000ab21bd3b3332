"""The storage reclaim page: the report (SQL to data), its presentation (SVG and HTML) and its FastAPI app."""

from blobgc.kinds import KINDS  # noqa: F401 - the figures name each kind's size sources: install the kinds
