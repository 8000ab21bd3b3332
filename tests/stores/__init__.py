"""Tests of the object stores other than S3, against their local servers."""
