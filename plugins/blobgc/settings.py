"""What blobgc is configured with, and the error a bad configuration raises.

A bad setting (a Variable that does not parse, a Param below its floor, a reference blobgc cannot
follow) is not something a retry can fix: the Airflow layer turns ConfigurationError into a task
failure without retries, with the message, before anything is deleted.
"""
from __future__ import annotations


class ConfigurationError(ValueError):
    """A setting that cannot be used as it is; the message names it and says what is expected."""
